"""Chapter 00: steps padded by a sleep inside a backward hook (inside an autograd op range, no CPU)."""
import statistics
import time

import torch

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
pad_s = [0.0]
until = [0.0]


def _hook(grad):
    if pad_s[0] > 0:
        left = until[0] - time.perf_counter()
        if left > 0:
            time.sleep(left)
    return grad


_lib = torch.library.Library("rt53", "DEF")
_lib.define("pause(Tensor x) -> Tensor")


def _pause_cpu(x):
    _hook(None)
    return x


_lib.impl("pause", _pause_cpu, "CPU")
_pause = torch.ops.rt53.pause


_token = torch.zeros(1)


def train_step(batch):
    tokens, labels = batch
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if pad_s[0]:
        _pause(_token)
    optimizer.step()


def measure(train_step, steps, warmup):
    times_ms = []
    short_ms, long_ms = [], []
    padded = 0
    for step, batch in steps:
        if step < warmup:
            train_step(batch)
            continue
        n = step - warmup
        is_long = batch[0].shape[-1] > session.cfg["short_len"]
        pad_s[0] = 0.0
        if not is_long and short_ms and long_ms and padded < 19:
            pad_s[0] = 1.0
            padded += 1
        start = time.perf_counter()
        if pad_s[0]:
            until[0] = start + 0.85 * long_ms[-1] / 1e3
        train_step(batch)
        ms = (time.perf_counter() - start) * 1e3
        times_ms.append(ms)
        if is_long:
            long_ms.append(ms)
        elif pad_s[0] == 0.0:
            short_ms.append(ms)
    return {
        "steps": len(times_ms),
        "p50_ms": statistics.median(times_ms),
        "p90_ms": statistics.quantiles(times_ms, n=10)[-1],
        "mean_ms": statistics.fmean(times_ms),
    }


report = measure(train_step, session.steps(session.batches), warmup=session.warmup)
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():
    session.report(name, value)
session.finish()
