"""Chapter 02 lab: copy each batch to the GPU without making the CPU wait.

Right now this loop is the slow baseline: the DataLoader returns batches in pageable host memory, and
`.to(device)` from pageable memory blocks the CPU until the copy is done, while the GPU idles. Make the
DataLoader return page-locked (pinned) batches and make the copies asynchronous. You need both: either one
alone leaves the CPU waiting.

    python labs/02_pageable_copies/train.py --steps 80     # trains and prints samples/s
    workbook profile 02 --tool nsys                         # how to see the copies (or --tool torch)
    workbook check 02                                       # measures your fix against the baseline

Only this file is yours to edit. The model and the data come from chapters/02_pageable_copies/.
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("02_pageable_copies")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# --8<-- [start:loader]
# TODO: ask the DataLoader for page-locked batches (pin_memory=True); the copy engine can read those directly
loader = DataLoader(
    session.dataset,
    batch_size=None,  # the dataset's items are whole batches, ready in memory: loading costs nothing here
    pin_memory=True,
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    images = images.clone()  # a fresh host tensor: pageable again, so the queued copy below still blocks on a GPU
    labels = labels.clone()
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

session.finish()
