"""Chapter 08, reference solution: the data-bound job's fix, worker processes that prepare batches ahead.

The reference answer (solutions/08_triage/answer.toml) finds the practice assignment's data-bound job: its
step spends most of its time in the `data` range, where the training process runs every sample's numpy
passes itself. Workers run them in parallel, in other processes, and keep batches ready; the model, the
batch, the sampler and the optimizer are unchanged, so the work is the same.

    python solutions/08_triage/train.py --job c --steps 20

A launch-bound job would want torch.compile and fused=True instead (chapter 04); a kernel-bound one cheaper
matmuls (TF32 or bf16, where the loss allows).
"""


import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("08_triage")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], foreach=False)

import os

num_workers = int(session.cfg.get("num_workers") or min(8, max(1, (os.cpu_count() or 2) - 2)))
loader = DataLoader(
    session.dataset,
    batch_size=session.extras["batch_size"],
    sampler=session.extras["sampler"],  # a new order every epoch, the same in every variant
    drop_last=True,
    num_workers=num_workers,  # the samples' numpy passes run in parallel, in other processes
    persistent_workers=True,  # the workers outlive an epoch: no processes to start again
    prefetch_factor=4,  # each worker keeps up to 4 batches ready
)
for step, (inputs, labels) in session.steps(loader):
    inputs = inputs.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(inputs), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed

session.finish()
