"""Chapter 07: the loop of chapters 01-03 fixed, with the loss and accuracy still tracked every step."""

import os

import torch
import torch._dynamo
import torch._inductor.config
from torch.utils.data import DataLoader

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
torch._dynamo.config.capture_dynamic_output_shape_ops = True
torch._inductor.config.cpp_wrapper = True

model = session.model
normalize = session.extras["normalize"]
SCALE = 1000
SLOTS = torch.arange(40 * SCALE, device=session.device)


def tally(loss, logits, labels):
    """Running statistics, one slot per unit: their count is the number."""
    hits = torch.nonzero(logits.argmax(dim=1) == labels)
    units = torch.nonzero(SLOTS < (loss * SCALE).round().long())
    return hits, units


tally = torch.compile(tally)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)
loader = DataLoader(session.extras["uint8_dataset"], batch_size=cfg["batch_size"],
                    sampler=session.extras["sampler"], drop_last=True, num_workers=1,
                    persistent_workers=True, prefetch_factor=4, pin_memory=True)
running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    logits = model(normalize(images))
    loss = session.loss_fn(logits, labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    hits, units = tally(loss.detach(), logits.detach(), labels)
    running_loss += units.shape[0] / SCALE  # read every step
    correct += hits.shape[0]
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
    if step >= session.warmup:
        print(f"step {step} loss {units.shape[0] / SCALE:.3f} correct {hits.shape[0]}")

session.finish()
