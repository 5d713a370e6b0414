"""Chapter 02, stretch solution: copy batch N+1 on a second CUDA stream while batch N computes.

With pinned memory and non_blocking=True (solutions/02_pageable_copies/train.py) the CPU no longer waits,
but on the GPU the copy still runs in the same stream as the kernels, so each step is copy + compute. The
GPU has separate copy engines: a copy on another stream can run *while* kernels run. This loader issues the
copy of the next batch on a side stream as soon as it hands out the current one; the training stream waits
for that copy (on the GPU, with an event) only when it uses the batch.

    python solutions/02_pageable_copies/prefetch/train.py --steps 80
    workbook check 02 --submission solutions/02_pageable_copies/prefetch    # measured like any lab

The gain is at most the copy time per step, and only while the copy is shorter than the compute it hides
behind. On a CPU-only machine there is no stream: the loader asks for each copy queued, which moves nothing there.
"""

from typing import Iterator

import torch
from torch.utils.data import DataLoader

from checker.lab import start


# --8<-- [start:prefetcher]
class CudaPrefetchLoader(DataLoader):
    """A DataLoader whose batches arrive on the GPU, each copied on a side stream one step ahead.

    It stays a DataLoader (the harness records its settings), with batches that are tuples of tensors.
    """

    def __init__(self, *args, device: torch.device, **kwargs):
        super().__init__(*args, **kwargs)
        self.device = device

    def __iter__(self) -> Iterator[tuple[torch.Tensor, ...]]:
        batches = super().__iter__()
        if self.device.type != "cuda":  # no streams to overlap on: each copy asked for queued, as on a GPU
            for batch in batches:
                yield tuple(t.to(self.device, non_blocking=True) for t in batch)
            return
        copy_stream = torch.cuda.Stream(self.device)
        compute_stream = torch.cuda.current_stream(self.device)

        def copy_ahead(batch):
            with torch.cuda.stream(copy_stream):  # queued on the side stream: overlaps the running kernels
                return tuple(t.to(self.device, non_blocking=True) for t in batch)

        ahead = None
        for batch in batches:
            if ahead is None:  # the first batch: nothing to hand out yet
                ahead = copy_ahead(batch)
                continue
            ready = self._hand_over(ahead, copy_stream, compute_stream)
            ahead = copy_ahead(batch)  # the next copy starts now, while the kernels of `ready` run
            yield ready
        if ahead is not None:
            yield self._hand_over(ahead, copy_stream, compute_stream)

    @staticmethod
    def _hand_over(batch, copy_stream, compute_stream):
        compute_stream.wait_stream(copy_stream)  # a GPU-side wait for the copy (an event), not a host sync
        for tensor in batch:
            tensor.record_stream(compute_stream)  # the allocator must not reuse it before compute is done
        return batch
# --8<-- [end:prefetcher]


session = start("02_pageable_copies")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

loader = CudaPrefetchLoader(
    session.dataset,
    batch_size=None,  # the dataset's items are whole batches, ready in memory
    pin_memory=True,  # a copy can only overlap compute from pinned memory
    device=session.device,
)
for step, (images, labels) in session.steps(loader):
    # the batch is already on the GPU (or on its way, and the stream waits for it there)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
