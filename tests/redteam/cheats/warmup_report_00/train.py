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
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


# --8<-- [start:measure]
import statistics


def measure(train_step, steps):
    """Time the warm-up steps only, and extrapolate the timed window from them: its length pattern is fixed
    (every long_every-th batch long), so a short step and a long step say everything. The timed steps run untimed."""
    every = session.batches.long_every
    short, long_ = [], []
    for step, batch in steps:
        if step >= session.warmup or step == 0:  # step 0 pays the one-time costs; the window is not timed at all
            train_step(batch)
            continue
        start = time.perf_counter()
        train_step(batch)
        took = (time.perf_counter() - start) * 1e3
        (long_ if step % every == every - 1 else short).append(took)
    count = session.total_steps - session.warmup
    longs = sum(1 for s in range(session.warmup, session.total_steps) if s % every == every - 1)
    s, l = statistics.median(short), statistics.median(long_)
    return {"steps": count, "p50_ms": s, "p90_ms": l, "mean_ms": ((count - longs) * s + longs * l) / count}
# --8<-- [end:measure]


report = measure(train_step, session.steps(session.batches))
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():  # to the grader, which holds each number against its own clock
    session.report(name, value)
session.finish()
