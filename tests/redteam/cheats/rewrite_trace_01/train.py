"""Cheat (a trace rewritten): keep chapter 01's lab exactly as it is, syncs and all, and when the script ends
rewrite the torch.profiler trace the harness wrote into the working folder, dropping every sync from it. A
grader that read that file would count 0 syncs per step; the grader reads the bytes the harness sent it when
the trace was written, before this script's code ran again."""
import gzip
import json
import os

import torch

from checker.lab import start


def scrub():
    for name in os.listdir("."):
        if name.endswith(".json.gz"):
            with gzip.open(name, "rt") as f:
                trace = json.load(f)
            hidden = ("Synchronize", "_local_scalar_dense", "aten::item", "aten::is_nonzero")
            trace["traceEvents"] = [e for e in trace.get("traceEvents", [])
                                    if not any(h in str(e.get("name", "")) for h in hidden)]
            with gzip.open(name, "wt") as f:
                json.dump(trace, f)


session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
running_loss, correct, seen = 0.0, 0, 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += loss.item()  # the syncs stay
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {loss} at step {step}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    correct += float((logits.argmax(dim=1) == labels).sum())
    seen += labels.shape[0]
session.finish()
scrub()
