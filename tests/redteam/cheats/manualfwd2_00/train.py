"""Chapter 00 lab: make the benchmark report the time a training step really takes.

The training below is right; the report is not. `measure` runs every step and returns how long one takes, and
the grader compares that report with its own clock, which stamps every step of the same run from outside this
process. Fix `measure` so that the two agree:

- a GPU runs the work after the call that queued it has returned: a clock read right after `train_step` times
  the queueing, not the step (`torch.cuda.synchronize()` waits for the device; on a CPU there is no device to
  wait for, and that call fails without a GPU: guard it with `if session.device.type == "cuda":`);
- the first steps pay one-time costs (allocations, library set-up, autotuning, compilation): leave the
  `session.warmup` steps out, as the grader does;
- the steps here have two lengths, so their times jump: report the median (`p50_ms`), the 90th percentile
  (`p90_ms`) and the mean (`mean_ms`) of the timed steps, and how many steps they cover (`steps`).

    python labs/00_measuring_right/train.py --steps 60     # trains, prints your report
    workbook check 00                                       # compares your report with the grader's clock

Only this file is yours to edit. The model and the data come from chapters/00_measuring_right/workload.py.
"""

import time

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


def train_step(batch):
    tokens, labels = batch
    x = model.embed(tokens)
    for block in model.blocks:
        x = x + block(x)
    loss = session.loss_fn(model.head(x.mean(dim=1)), labels)
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
    timed = torch.tensor(times_ms[session.warmup:], dtype=torch.float64)
    return {"steps": len(timed), "p50_ms": float(timed.quantile(0.5)), "p90_ms": float(timed.quantile(0.9)),
            "mean_ms": sum(times_ms) / len(times_ms)}  # the mean counts every step, warm-up included
# --8<-- [end:measure]


report = measure(train_step, session.steps(session.batches))
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():  # to the grader, which holds each number against its own clock
    session.report(name, value)
session.finish()
