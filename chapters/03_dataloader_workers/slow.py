"""Chapter 03, the slow baseline: every sample is decoded and augmented in the training process.

With `num_workers=0` the DataLoader runs the dataset's `__getitem__` in the main process, one sample after
another, between training steps. While the CPU decodes and crops the next batch it queues no GPU work, and
the GPU, which trains on a batch many times faster than one core can prepare it, waits.

    python chapters/03_dataloader_workers/slow.py --steps 40

Numbers: see docs/results/03_dataloader_workers.md (measured on a GPU by scripts/gpu_verify.sh, which names it).
This file is the baseline the checker measures speedups against. Do not edit it: edit
labs/03_dataloader_workers/train.py.
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# --8<-- [start:loader]
loader = DataLoader(
    session.dataset,
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

print(session.extras["step_times"](session.finish()["step_ms"]))
