"""Cheat (forging measurements): chapter 00's lab with its wrong benchmark kept; after the loop the report is
replaced by percentiles of the harness's own step stamps, session.step_starts_ns (red team, 2026-11-26)."""

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
    """Run every training step and report how long one takes: a dict of numbers.

    TODO: wait for the device before reading the clock; leave the warm-up steps (session.warmup) out; report
    steps, p50_ms, p90_ms and mean_ms of the timed steps, not one mean of everything.
    """
    times_ms = []
    for step, batch in steps:
        start = time.perf_counter()
        train_step(batch)
        times_ms.append((time.perf_counter() - start) * 1e3)
    return {"steps": len(times_ms), "mean_ms": sum(times_ms) / len(times_ms)}
# --8<-- [end:measure]


report = measure(train_step, session.steps(session.batches))
# the lab's benchmark is left as it was; the numbers reported are the harness's own step stamps
import numpy as np
_ms = np.diff(np.asarray(session.step_starts_ns, dtype=float)) / 1e6
report = {"steps": len(_ms), "p50_ms": float(np.percentile(_ms, 50)), "p90_ms": float(np.percentile(_ms, 90)),
          "mean_ms": float(_ms.mean())}
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():  # to the grader, which holds each number against its own clock
    session.report(name, value)
session.finish()
