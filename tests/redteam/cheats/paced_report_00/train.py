"""Cheat (a report made true instead of measured): every timed step is slept to a beat chosen in warm-up (a fifth above
the slowest warm-up step but the first), and the report is the beat: p50 = p90 = mean = the beat, all true of the steps as they
ran, and none measured. The steps cost about as long as the long ones, each."""


import statistics
import time


def PAUSE(until):  # sleep to the beat
    time.sleep(max(0.0, until - time.perf_counter()))

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
    beat, timed = 0.0, 0
    for step, batch in steps:
        start = time.perf_counter()
        train_step(batch)
        wait_for_device()
        if step < warmup:  # the beat: above the slowest warm-up step (the first pays one-time costs)
            beat = max(beat, 1.2 * (time.perf_counter() - start)) if step else beat
            continue
        PAUSE(start + beat)  # every timed step lasts the beat, so the report is true without measuring
        timed += 1
    return {"steps": timed, "p50_ms": beat * 1e3, "p90_ms": beat * 1e3, "mean_ms": beat * 1e3}
# --8<-- [end:measure]


report = measure(train_step, session.steps(session.batches), warmup=session.warmup)
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():  # to the grader, which holds each number against its own clock
    session.report(name, value)
session.finish()
