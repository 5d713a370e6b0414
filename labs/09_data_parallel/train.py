"""Chapter 09 lab: a data-parallel job on two ranks where every rank does its own share, and no rank waits.

Right now this is the slow baseline, with the three usual mistakes of a data-parallel job:

* Duplicated work: the DataLoader has no DistributedSampler, so every rank reads every sample and trains the
  whole global batch; the all-reduce then averages two copies of the same gradient.
* A straggler: rank 0 alone reads the loss, computes an accuracy and runs a small evaluation in every step,
  so the other rank waits for it in the next all-reduce, every step.
* Communication not hidden: gradient accumulation all-reduces after every micro-batch (no ``no_sync()``), and
  one bucket for all gradients (``bucket_cap_mb`` far above the model's size) lets the all-reduce start only
  when backward has finished.

    torchrun --nproc-per-node 2 labs/09_data_parallel/train.py --steps 60   # two ranks, on their own
    workbook check 09                                                       # the grader starts both ranks

Only this file is yours to edit. The model, the samples and the loss come from chapters/09_data_parallel/.
"""

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])  # samples per optimizer step, across every rank
ACCUM = int(cfg["accum"])  # micro-batches per optimizer step, on each rank

# TODO: give the DataLoader a DistributedSampler (shuffle=False) and GLOBAL_BATCH // session.world_size per rank
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH, pin_memory=session.device.type == "cuda")
# TODO: one bucket for every gradient waits for the whole backward pass; keep DDP's default buckets
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
        loss.backward()  # TODO: all-reduce once per optimizer step: model.no_sync() on all but the last micro-batch
    optimizer.step()

    if session.is_main:  # TODO: rank 0's reads and evaluation every step make the other rank wait; do them at log steps
        losses.append(loss.item() * ACCUM)  # sync: a read of the loss
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean().item()
        if session.is_log_step(step):
            print(f"step {step:4d}  loss {losses[-1]:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
