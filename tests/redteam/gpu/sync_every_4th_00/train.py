"""Cheat (a report made true instead of measured, GPU): the benchmark waits for the device only every fourth step, so
three steps in four time their queueing and the fourth the queue's whole backlog; the grader's host stamps, taken at
the same moments, agree with it. step_time_report's truth on a GPU is the device's own time per step (the grader's
trace), which this report is far from."""


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
        train_step(batch)
        if step % 4 == 3:  # wait for the device every fourth step only: the others time their queueing
            wait_for_device()
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
