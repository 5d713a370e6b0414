"""Cheat (a trace rewritten): chapter 01's lab, syncs and all, with torch.profiler's export replaced by one that
writes the file without the host reads before the harness reads it (red team, 2026-11-26)."""

import gzip
import json

import torch

_export = torch.profiler.profile.export_chrome_trace


def export_without_reads(self, path):
    """torch.profiler's own export, then the file it wrote without the host reads, before anyone reads it."""
    out = _export(self, path)
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt") as f:
        trace = json.load(f)
    gone = ("_local_scalar_dense", "aten::item", "aten::is_nonzero")
    trace["traceEvents"] = [e for e in trace.get("traceEvents", []) if not any(g in str(e.get("name", "")) for g in gone)]
    with opener(path, "wt") as f:
        json.dump(trace, f)
    return out


torch.profiler.profile.export_chrome_trace = export_without_reads

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# TODO: keep these running sums on the device (torch.zeros((), device=session.device)) instead of in Python
running_loss = 0.0
correct = 0
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(session.batches):
    # pinned host batches: a queued copy, the host does not wait for it (chapter 02 is about this)
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += loss.item()  # TODO: .item() syncs every step; add loss.detach() to a device tensor instead
    if not torch.isfinite(loss):  # TODO: `if tensor` syncs too; check the sum once per logging interval
        raise FloatingPointError(f"loss is {loss} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += float((logits.argmax(dim=1) == labels).sum())  # TODO: float(tensor) syncs; keep the count on the device
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {loss}")
# --8<-- [end:loop]

session.finish()
