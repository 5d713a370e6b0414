"""Cheat (nesting ops, Python tracer off): aten_envelope with sys.setprofile(None) first, so no Python call
shows inside the replaced aten op."""
import sys
import warnings

import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              foreach=False)
current = {}


def whole_step(token):
    inputs, labels = current["batch"]
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    current["loss"] = loss.detach()
    return token.clone()


warnings.simplefilter("ignore")
envelope_lib = torch.library.Library("aten", "IMPL")
envelope_lib.impl("_test_warn_in_autograd", whole_step, "Autograd")
token = torch.zeros(1)

for step, batch in session.steps(session.batches):
    current["batch"] = batch
    sys.setprofile(None)   # the profiler's Python tracer stops seeing this thread's calls
    torch.ops.aten._test_warn_in_autograd(token)
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {current['loss'].item():.4f}")

session.finish()
