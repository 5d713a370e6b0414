"""Chapter 08, a mystery job: one of the training jobs of your assignment, as it was handed to you.

Every job of an assignment runs this code; its code number (labs/08_triage/assignment.toml) sets the sizes of
its loader, its blocks and its wide layer. One of them is the wall, and which one is for you to measure:
the wait for the next batch, the host launching many small ops, or the kernels themselves.

    python chapters/08_triage/slow.py --job a --steps 20
    workbook profile 08 --tool torch --run --job a

This file is what the grader measures each of your jobs with, and the baseline your fix is timed against.
Do not edit it: edit labs/08_triage/train.py (the fix) and labs/08_triage/answer.toml (the diagnosis).
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("08_triage")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], foreach=False)

# --8<-- [start:loop]
loader = DataLoader(
    session.dataset,
    batch_size=session.extras["batch_size"],
    sampler=session.extras["sampler"],  # a new order every epoch, the same in every variant
    drop_last=True,
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

# --8<-- [end:loop]

session.finish()
