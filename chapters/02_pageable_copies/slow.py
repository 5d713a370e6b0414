"""Chapter 02, the slow baseline: every batch is copied to the GPU from pageable memory, and the CPU waits.

The DataLoader hands over batches in ordinary (pageable) host memory. `.to(device)` from pageable memory is a
blocking copy: the CUDA driver first copies the batch into a small pinned staging buffer, piece by piece, and
PyTorch then waits for the copy to finish. While it copies, the CPU queues nothing and the GPU has nothing to
run; the copy itself runs at a fraction of what the bus can do.

    python chapters/02_pageable_copies/slow.py --steps 80

Numbers: see docs/results/02_pageable_copies.md (measured on a GPU by scripts/gpu_verify.sh, which names it).
This file is the baseline the checker measures speedups against. Do not edit it: edit
labs/02_pageable_copies/train.py.
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
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)  # pageable source: a blocking copy, the CPU waits for it
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

session.finish()
