"""Chapter 00 cheat (red team 38): a report decided before the steps it describes, made true by padding each
step to a beat with recorded elementwise ops (not a sleep or a clock spin: an op runs all the time).

The first three timed short steps and long steps set two beats (1.15x the quickest of each kind). From then on the
report is fixed: p50 = the short beat, p90 = the long beat, mean = the beats' mean over the step pattern. Every
later step is padded with `pad.mul_(1.0)` chunks until its beat, so the clock reads in it measure the beat.
"""

import statistics
import time

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
LONG = int(session.cfg["long_len"])
pad = torch.ones(32_000_000)  # padding: elementwise ops over a slice sized to the time left (few ops per step)
rate = [2e9]  # elements per second of pad.mul_, learnt as it goes


def train_step(batch):
    tokens, labels = batch
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def measure(train_step, steps, warmup):
    beats = {}
    kinds = []
    times_ms = []
    for step, batch in steps:
        if step < warmup:
            train_step(batch)
            continue
        kind = "long" if batch[0].shape[1] == LONG else "short"
        kinds.append(kind)
        start = time.perf_counter()
        train_step(batch)
        seen = beats.setdefault(kind, [])
        if len(seen) < 3:  # the first three of each kind set its beat: 1.15x the quickest of them
            seen.append(1.15 * (time.perf_counter() - start))
            continue
        deadline = start + min(seen)
        now = time.perf_counter()
        while now < deadline:
            k = int(min(len(pad), max(50_000, (deadline - now) * rate[0] * 0.9)))
            pad[:k].mul_(1.0)
            later = time.perf_counter()
            rate[0] = 0.5 * rate[0] + 0.5 * k / max(later - now, 1e-6)
            now = later
        times_ms.append((time.perf_counter() - start) * 1e3)
    short, long = min(beats["short"]) * 1e3, min(beats["long"]) * 1e3
    declared = [long if k == "long" else short for k in kinds]  # what each step was made to last
    return {"steps": len(kinds), "p50_ms": short, "p90_ms": long, "mean_ms": statistics.fmean(declared)}


report = measure(train_step, session.steps(session.batches), warmup=session.warmup)
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():
    session.report(name, value)
session.finish()
