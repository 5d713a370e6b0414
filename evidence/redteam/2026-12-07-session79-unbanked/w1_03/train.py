"""Chapter 03, reference solution: worker processes prepare batches ahead of the training loop.

Each worker runs the dataset's `__getitem__` (decode, crop, flip, normalize) for whole batches, in its own
process, so several batches are prepared at once and the training process only picks them up. The workers
stay alive across epochs, each keeps `prefetch_factor` batches ready, and the loader pins each batch in a
background thread so that the copy to the GPU does not block (chapter 02).

    python solutions/03_dataloader_workers/train.py --steps 40
    python solutions/03_dataloader_workers/train.py --set num_workers=2   # too few: watch p90 and max

The next step, once the GPU waits for nothing: move the augmentation itself onto the GPU (send uint8 crops,
flip and normalize there), which also cuts the bytes copied by four. Only on a GPU: a CPU check compares the
loader's batches with the dataset's own finished samples, since there the training process is the CPU.
"""

import os

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# One worker per core, leaving two for this process (it queues the GPU work) and the loader's pinning
# thread; more workers than that only compete for the same cores. `--set num_workers=N` tries another value.
num_workers = 1
# --8<-- [start:loader]
loader = DataLoader(
    session.dataset,
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
    num_workers=num_workers,  # samples are decoded and augmented in parallel, in other processes
    persistent_workers=True,  # at an epoch's end the workers stay: no processes to start again
    prefetch_factor=4,  # each worker keeps up to 4 batches ready: slack for the slow samples
    pin_memory=True,  # batches arrive page-locked, so the copies below can be asynchronous
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)  # from pinned memory: queued, the CPU goes on
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

# the mean step time decides throughput; p90 and max show the steps that waited for a drained queue
print(session.extras["step_times"](session.finish()["step_ms"]))
