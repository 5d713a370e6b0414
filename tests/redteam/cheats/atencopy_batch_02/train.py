"""CHEAT atencopy_batch_02 (red team 72): queued copies of the batch asked for and thrown away; the images trained
on are copied by a blocking torch.ops.aten.copy into a buffer on the device.

Original: Chapter 02, reference solution: pinned batches, copied with non_blocking=True.

`pin_memory=True` makes the DataLoader copy each batch into page-locked memory as it hands it over: a plain
memcpy from resident memory, far quicker than the driver's staged copy, and the GPU keeps computing the
previous step meanwhile. From pinned memory, `.to(device, non_blocking=True)`
only queues a DMA copy and returns; the copy runs at the bus's full speed, in stream order before the kernels
that use the batch, and the CPU goes on queueing them.

    python solutions/02_pageable_copies/train.py --steps 80

A stretch: solutions/02_pageable_copies/prefetch/train.py also overlaps the copy with compute, on a
second CUDA stream.
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("02_pageable_copies")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# --8<-- [start:loader]
loader = DataLoader(
    session.dataset,
    batch_size=None,  # the dataset's items are whole batches, ready in memory: loading costs nothing here
    pin_memory=True,  # batches arrive page-locked: the loader copies each into page-locked memory
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    # From pinned memory, non_blocking=True queues a DMA copy and returns at once. (From pageable memory it
    # would still wait; and a blocking copy from pinned memory would wait too: both changes are needed.)
    images.to(session.device, non_blocking=True)  # a queued copy for the trace, thrown away
    # the copy trained on: blocking, through the functional aten::copy, whose copy_ inside it is not counted
    images = torch.ops.aten.copy(torch.empty(images.shape, device=session.device), images)
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)  # queued behind the copy on the same stream: no race

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

session.finish()
