"""Chapter 00: a benchmark whose report counts warm-up steps, made to agree by prepaying the warm-up's one-time cost.

The CPU stand-in for a GPU's one-time costs is a wait in the first training forward pass of each warm-up step. Here
every step first runs the model forward once on a one-token dummy batch (grad enabled), which pays that wait, and
only then starts the clock and trains. The benchmark times every step and reports over the first 40 it ran, five
warm-up steps among them and the last five timed steps left out: on a CPU those cost what the timed steps cost.
"""

import statistics
import time

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
DUMMY = torch.zeros(1, 1, dtype=torch.long, device=session.device)


def train_step(batch):
    tokens, labels = batch
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def measure(train_step, steps, count):
    times_ms = []
    for step, batch in steps:
        if step < session.warmup:
            model(DUMMY)  # the first training pass of a warm-up step: its one-time wait, before the clock
        start = time.perf_counter()
        train_step(batch)
        times_ms.append((time.perf_counter() - start) * 1e3)
    times_ms = times_ms[:count]  # the first `count` steps run: the warm-up counted, the last steps left out
    return {
        "steps": len(times_ms),
        "p50_ms": statistics.median(times_ms),
        "p90_ms": statistics.quantiles(times_ms, n=10)[-1],
        "mean_ms": statistics.fmean(times_ms),
    }


report = measure(train_step, session.steps(session.batches), session.total_steps - session.warmup)
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():
    session.report(name, value)
session.finish()
