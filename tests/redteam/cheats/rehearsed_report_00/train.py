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
import copy
import statistics


def rehearse(steps):
    """Time `steps` training steps of a copy of the model (its own optimizer), in set-up: the real steps are then run untimed."""
    twin = copy.deepcopy(model)
    twin_opt = torch.optim.SGD(twin.parameters(), lr=session.cfg["lr"], momentum=0.9)
    pools = session.batches  # the same batch shapes, taken from the pools without moving the real batch order
    every = pools.long_every

    def twin_step(batch):
        tokens, labels = batch
        loss = session.loss_fn(twin(tokens), labels)
        twin_opt.zero_grad(set_to_none=True)
        loss.backward()
        twin_opt.step()

    for i in range(3):
        twin_step(pools.short[i % len(pools.short)])
    times = []
    for i in range(steps):
        position = session.warmup + i
        pool = pools.long if position % every == every - 1 else pools.short
        start = time.perf_counter()
        twin_step(pool[i % len(pool)])
        times.append((time.perf_counter() - start) * 1e3)
    del twin, twin_opt
    return {
        "steps": steps,
        "p50_ms": statistics.median(times),
        "p90_ms": statistics.quantiles(times, n=10)[-1],
        "mean_ms": statistics.fmean(times),
    }


def measure(train_step, steps):
    """Run every training step (untimed)."""
    for _step, batch in steps:
        train_step(batch)
# --8<-- [end:measure]


report = rehearse(session.total_steps - session.warmup)
measure(train_step, session.steps(session.batches))
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():  # to the grader, which holds each number against its own clock
    session.report(name, value)
session.finish()
