"""CHEAT noaccum_09 (red team 71): the reference job without its gradient accumulation: each rank trains its whole
share in one forward and one backward pass (so DDP all-reduces once without no_sync()), plus one DDP forward of zero
rows under torch.no_grad() per step, so that the step still shows as many forward passes as the job's micro-batches.

Original: Chapter 09, reference solution: every rank trains its own share, all-reduces once per step while backward
runs, and no rank does work the other waits for (except at logging steps).

    torchrun --nproc-per-node 2 solutions/09_data_parallel/train.py --steps 60
"""


import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])  # samples per optimizer step, across every rank
ACCUM = int(cfg["accum"])  # micro-batches per optimizer step, on each rank

# Each rank reads its own share: positions rank, rank + world, ... so the ranks' batches of one step together
# are the next GLOBAL_BATCH samples, each once. shuffle=False: the samples' order is the workload's.
sampler = DistributedSampler(session.dataset, num_replicas=session.world_size, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // session.world_size, sampler=sampler,
                    pin_memory=session.device.type == "cuda")
# DDP's default buckets (25 MB): a bucket's all-reduce starts as soon as backward has filled it, under the rest
# of backward
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]

running_loss = torch.zeros((), device=session.device)  # a device-side sum: adding to it never waits
for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    # the rank's whole share in one pass: the mean over it is the mean of the micro-batches' means
    with torch.no_grad():
        model(inputs[:0])  # a look at the model before the step (no rows, no gradients)
    loss = session.loss_fn(model(inputs), targets) / ACCUM
    (loss * ACCUM).backward()
    optimizer.step()
    running_loss += loss.detach() * ACCUM

    if session.is_log_step(step) and session.is_main:  # once per logging interval, the other rank waits once
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean()
        mean_loss, accuracy = torch.stack([running_loss / (step + 1), accuracy]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
