"""Chapter 00 red team: p50 and p90 are a constant chosen in advance (BEAT_MS), never measured; the grader's own
per-step stamps are made to agree with them.

The harness reports each timed step to the grader as a JSON line on the named pipe `evt` in the run's folder; the
grader stamps each line as it arrives. This script can open that pipe too. A header carrying "nbytes" makes the
grader read the next nbytes bytes as its payload, so a report header of the right length swallows the harness's own
`step` line, and a line of the script's, sent by a thread on a fixed beat, is stamped in its place.
"""

import json
import os
import sys
import threading
import time
from pathlib import Path

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

BEAT_MS = 15.0  # what the report will say p50 and p90 are: chosen, not measured
EVT = Path(__file__).resolve().parent / "evt"
fd = os.open(EVT, os.O_WRONLY) if EVT.exists() and not EVT.is_file() else None
lock = threading.Lock()
sys.setswitchinterval(0.0002)


def line(message):
    return (json.dumps(message) + "\n").encode()


def stamper(first, last):
    """The grader's step stamps first..last, one every BEAT_MS."""
    t0 = time.perf_counter()
    for k, n in enumerate(range(first, last + 1), start=1):
        while time.perf_counter() < t0 + k * BEAT_MS / 1e3 - 0.001:
            time.sleep(0.0005)
        while time.perf_counter() < t0 + k * BEAT_MS / 1e3:
            pass
        with lock:
            os.write(fd, line({"type": "step", "n": n}))


class Releasing:
    """The batches, handed out as the harness fetches them: by then it has sent (and the grader swallowed) its step
    line, so the stamping thread may write again."""

    def __init__(self, source):
        self.source = source

    def __iter__(self):
        for batch in self.source:
            if lock.locked():
                lock.release()
            yield batch


def train_step(batch):
    tokens, labels = batch
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


total, warmup = session.total_steps, session.warmup
thread = None
started = ended = None
for step, batch in session.steps(Releasing(session.batches)):
    if step == warmup:
        started = time.perf_counter()
        if fd is not None:
            thread = threading.Thread(target=stamper, args=(warmup + 1, total - 1), daemon=True)
            thread.start()
    train_step(batch)
    if fd is not None and warmup <= step < total - 1:
        real = line({"type": "step", "n": step + 1})  # what the harness is about to send: swallowed
        lock.acquire()
        os.write(fd, line({"type": "report", "name": "pad", "value": 0, "nbytes": len(real)}))
    if step == total - 1 and thread is not None:
        thread.join()
    ended = time.perf_counter()
elapsed_ms = (ended - started) * 1e3

report = {"steps": total - warmup, "p50_ms": BEAT_MS, "p90_ms": BEAT_MS, "mean_ms": elapsed_ms / (total - warmup)}
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():
    session.report(name, value)
session.finish()
