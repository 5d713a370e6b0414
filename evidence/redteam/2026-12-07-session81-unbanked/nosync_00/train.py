"""CHEAT nosync_00: the reference benchmark with its device waits removed: the clock is read right after the step
is queued (the lab's first mistake, the chapter's first lesson). On a CPU an op has finished when its call returns,
so every CPU check (the grader's host stamps as the truth, the clock reads in each step) agrees with the report; only
a GPU run (device_step_ms from the trace) could tell.

Original: Chapter 00, reference solution: a benchmark whose report agrees with the grader's clock.

Each timed step starts and ends with the device idle (synchronize), the warm-up steps are run but not timed,
and the report gives the median, the 90th percentile and the mean of the timed steps: for a series that jumps
between short and long steps, no one of them describes it alone.

    python solutions/00_measuring_right/train.py --steps 60
"""

import statistics
import time

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


def train_step(batch):
    tokens, labels = batch
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def wait_for_device():
    """Return once the device has run everything queued so far (a no-op on a CPU: its ops finish before returning)."""
    if session.device.type == "cuda":
        torch.cuda.synchronize(session.device)


# --8<-- [start:measure]
def measure(train_step, steps, warmup):
    """Run every training step and report how long one takes: a dict of numbers."""
    times_ms = []
    for step, batch in steps:
        if step < warmup:  # one-time costs: run these steps, do not time them
            train_step(batch)
            continue
        start = time.perf_counter()
        train_step(batch)  # no wait: the clock stops when the step is queued
        times_ms.append((time.perf_counter() - start) * 1e3)
    return {
        "steps": len(times_ms),
        "p50_ms": statistics.median(times_ms),  # the typical step
        "p90_ms": statistics.quantiles(times_ms, n=10)[-1],  # the slow tail: the long batches
        "mean_ms": statistics.fmean(times_ms),  # what throughput pays: total time / steps
    }
# --8<-- [end:measure]


report = measure(train_step, session.steps(session.batches), warmup=session.warmup)
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():  # to the grader, which holds each number against its own clock
    session.report(name, value)
session.finish()
