"""Chapter 00, the baseline benchmark: it trains correctly and reports its step time wrongly.

`measure` runs every training step and reports how long one takes. Three habits make that report wrong: it
reads the clock while the GPU is still running the step it timed (no synchronize), it counts the warm-up
steps, and it sums a jittery series up in one mean. The training is right; the number is not.

    python chapters/00_measuring_right/slow.py --steps 60

This file is the unmodified lab, kept as the baseline. Do not edit it: edit labs/00_measuring_right/train.py.
"""

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


# --8<-- [start:measure]
def measure(train_step, steps):
    """Run every training step and report how long one takes: a dict of numbers."""
    times_ms = []
    for step, batch in steps:
        start = time.perf_counter()
        train_step(batch)
        times_ms.append((time.perf_counter() - start) * 1e3)
    return {"steps": len(times_ms), "mean_ms": sum(times_ms) / len(times_ms)}
# --8<-- [end:measure]


report = measure(train_step, session.steps(session.batches))
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():  # to the grader, which holds each number against its own clock
    session.report(name, value)
session.finish()
