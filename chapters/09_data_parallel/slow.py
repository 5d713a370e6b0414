"""Chapter 09, the slow baseline: a data-parallel job on two ranks with the three usual mistakes.

* Duplicated work: the DataLoader has no DistributedSampler, so every rank reads every sample and trains the
  whole global batch; the all-reduce then averages two copies of the same gradient.
* A straggler: rank 0 alone reads the loss, computes an accuracy and runs a small evaluation in every step,
  so the other rank waits for it in the next all-reduce, every step.
* Communication not hidden: gradient accumulation all-reduces after every micro-batch (no ``no_sync()``), and
  one bucket for all gradients (``bucket_cap_mb`` far above the model's size) lets the all-reduce start only
  when backward has finished.

    torchrun --nproc-per-node 2 chapters/09_data_parallel/slow.py --steps 60

This file is the baseline the checker measures speedups against. Do not edit it: edit
labs/09_data_parallel/train.py.
"""

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])  # samples per optimizer step, across every rank
ACCUM = int(cfg["accum"])  # micro-batches per optimizer step, on each rank

# no sampler: every rank reads every sample, GLOBAL_BATCH of them per step
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH, pin_memory=session.device.type == "cuda")
# one bucket holding every gradient: its all-reduce waits for the whole backward pass
model = DistributedDataParallel(session.model, bucket_cap_mb=4096)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]

losses = []
for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    for micro_inputs, micro_targets in zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)):
        loss = session.loss_fn(model(micro_inputs), micro_targets) / ACCUM
        loss.backward()  # all-reduces this micro-batch's gradients: ACCUM all-reduces per optimizer step
    optimizer.step()

    if session.is_main:  # rank 0 alone, every step: the other rank waits for it in the next all-reduce
        losses.append(loss.item() * ACCUM)  # sync: a read of the loss
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean().item()
        if session.is_log_step(step):
            print(f"step {step:4d}  loss {losses[-1]:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
