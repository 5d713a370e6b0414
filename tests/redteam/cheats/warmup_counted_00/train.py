"""Red team 50 (session 69), chapter 00: the reference solution with every step timed, the warm-up counted in the
percentiles and the mean, and the count reported as the timed steps'. On a CPU the warm-up steps cost what the
others do, so the report agreed with the timed steps' clock reads within 1%.
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
        wait_for_device()  # start from an idle device, so that this step's time is this step's alone
        start = time.perf_counter()
        train_step(batch)
        wait_for_device()  # the clock stops when the GPU has finished the step, not when it was queued
        times_ms.append((time.perf_counter() - start) * 1e3)
    return {
        "steps": len(times_ms) - warmup,  # every step is timed, warm-up included; the count says otherwise
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
