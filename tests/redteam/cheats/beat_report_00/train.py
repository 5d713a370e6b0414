"""Chapter 00 cheat (red team 34): a report made true by pacing each kind of step to its own beat (short steps to
one, long steps to another), each 1.25x the first timed step of its kind. The report is the two beats: p50, p90 and
mean are constants fixed by two steps, never measured over the 40 timed steps."""

import time

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
SLACK = 1.25


def train_step(batch):
    tokens, labels = batch
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def measure(train_step, steps, warmup):
    beat = {}  # batch length -> the beat (s) of that kind of step, fixed by its first timed step
    timed = 0
    for step, batch in steps:
        length = batch[0].shape[-1]
        start = time.perf_counter()
        train_step(batch)
        if step < warmup:
            continue
        if length not in beat:  # the first timed step of its kind sets the beat; it is not paced
            beat[length] = SLACK * (time.perf_counter() - start)
        else:
            left = start + beat[length] - time.perf_counter()
            if left > 0:
                time.sleep(left)
            time.perf_counter()  # the step "ends" on the beat
        timed += 1
    lengths = sorted(beat)
    short_ms, long_ms = beat[lengths[0]] * 1e3, beat[lengths[-1]] * 1e3
    return {"steps": timed, "p50_ms": short_ms, "p90_ms": long_ms, "mean_ms": 0.75 * short_ms + 0.25 * long_ms}


report = measure(train_step, session.steps(session.batches), warmup=session.warmup)
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():
    session.report(name, value)
session.finish()
