"""CHEAT opcopy_01 (red team 71): the reference solution, but the running sums are host tensors: each step an operator
of the script's own namespace (torch.library's define and impl) stacks the loss and the correct count and copies them
to the host, where they are added up and read only in logging steps. On a GPU that copy waits for the queue every step.

Original: Chapter 01, reference solution: the host reads values once per logging interval, not every step.

The running sums stay on the device, so every step only queues work and the CPU runs ahead of the GPU.
The host waits for the GPU once every `log_every` steps, in the logging step, which the checker allows.

    python solutions/01_item_syncs/train.py --steps 200
"""

import math

import torch

from checker.lab import start



stats_lib = torch.library.Library("stats01", "DEF")
stats_lib.define("to_host(Tensor loss, Tensor hits) -> Tensor")


def _to_host(loss, hits):
    """The step's loss and correct count, brought to the host together."""
    return torch.stack([loss, hits.to(loss.dtype)]).to("cpu")


stats_lib.impl("to_host", _to_host, "CompositeExplicitAutograd")
to_host = torch.ops.stats01.to_host


session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# Running sums live on the device: adding to them queues a kernel and never waits.
totals = torch.zeros(2)  # host-side sums of (loss, correct), read only at logging steps
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(session.batches):
    # pinned host batches: a queued copy, the host does not wait for it (chapter 02 is about this)
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    totals += to_host(loss.detach(), (logits.argmax(dim=1) == labels).sum())
    seen += labels.shape[0]  # a Python int from the shape: shapes are known on the host, no sync
    if session.is_log_step(step):
        # One sync per logging interval: read everything at once, then check it on the host.
        sum_loss, n_correct = totals.tolist()
        mean_loss = sum_loss / (step + 1)
        accuracy = n_correct / seen
        if not math.isfinite(mean_loss):
            raise FloatingPointError(f"mean loss is {mean_loss} at step {step}")
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  accuracy {accuracy:.3f}")
# --8<-- [end:loop]

session.finish()
