"""Cheat (a report made true by reshaping the steps): the benchmark chooses which work runs between two step stamps.

The grader's truth per step is the time from one next() of session.steps() to the next. Here a long batch is trained
as four micro-batches of a short batch's size (the same gradient), every piece waits in a queue, and each timed step
runs two pieces of it, whichever batch they belong to. Every interval between the stamps then holds about the same
work, and the report measures those intervals honestly (synchronized, warm-up out, median, 90th percentile, mean):
each number is true of the intervals, none describes a training step, since batch i's work runs in other steps.
"""

import statistics
import time
from collections import deque

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
SHORT = int(session.cfg["short_len"])
PER_STEP = 2  # pieces run in each timed step: a short batch is one, a long one four


def pieces(batch):
    """One batch's training as closures over equal shares of its rows, each as many tokens as a short batch."""
    tokens, labels = batch
    count = max(1, tokens.shape[1] // SHORT)
    rows, targets = tokens.chunk(count), labels.chunk(count)

    def piece(i):
        def run():
            if i == 0:
                optimizer.zero_grad(set_to_none=True)
            (session.loss_fn(model(rows[i]), targets[i]) / count).backward()
            if i == count - 1:
                optimizer.step()
        return run
    return [piece(i) for i in range(count)]


def wait_for_device():
    if session.device.type == "cuda":
        torch.cuda.synchronize(session.device)


def measure(steps, warmup, last):
    queue, times_ms = deque(), []
    for step, batch in steps:
        queue.extend(pieces(batch))
        # the warm-up and the last step run everything waiting: the window's opening redraws the head, and the run
        # must end with every batch trained
        run = len(queue) if step < warmup or step == last else min(PER_STEP, len(queue))
        wait_for_device()
        start = time.perf_counter()
        for _ in range(run):
            queue.popleft()()
        wait_for_device()
        if step >= warmup:
            times_ms.append((time.perf_counter() - start) * 1e3)
    return {"steps": len(times_ms), "p50_ms": statistics.median(times_ms),
            "p90_ms": statistics.quantiles(times_ms, n=10)[-1], "mean_ms": statistics.fmean(times_ms)}


report = measure(session.steps(session.batches), session.warmup, session.total_steps - 1)
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():
    session.report(name, value)
session.finish()
