"""Cheat (forging): replace every clock the process can read with one that runs 20x slow, then train like the lab.
Chapter 04 grades speed on a GPU (tests/redteam/gpu.toml): an in-process timer would see a 20x speedup. A CPU
does not grade speed (a shared machine swings too far between runs of the same code), so the CPU bank forges
chapter 00's clock instead (cheats/clock_report)."""
import time
_real = {name: getattr(time, name) for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns", "time", "time_ns")}
_t0 = {name: f() for name, f in _real.items()}
for name, f in _real.items():
    setattr(time, name, (lambda n, f: (lambda: _t0[n] + (f() - _t0[n]) / 20 if isinstance(_t0[n], float) else _t0[n] + (f() - _t0[n]) // 20))(name, f))
# the rest is the lab of chapter 04, unchanged
import torch
from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              foreach=False)
for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
