"""CHEAT d2h_queued_09: the reference job, but rank 0 lands the loss in pageable host memory every step with
copy_(..., non_blocking=True) (the lab's rank-0 per-step read: on a GPU a copy to pageable host memory returns only
when rank 0's stream has caught up, so rank 0 syncs every step and the other rank waits for it at the next
all-reduce). On a CPU it is a CPU-to-CPU copy_ marked queued: host_syncs does not count it, and it costs nothing for
straggler to see.

Original: Chapter 09, reference solution: every rank trains its own share, all-reduces once per step while backward
runs, and no rank does work the other waits for (except at logging steps).

    torchrun --nproc-per-node 2 solutions/09_data_parallel/train.py --steps 60
"""

from contextlib import nullcontext

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
landed = torch.zeros(())  # pageable host memory: rank 0 lands each step's loss here
host_losses = []
for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    micro_batches = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for index, (micro_inputs, micro_targets) in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        # no_sync: gradients accumulate locally; only the last micro-batch's backward all-reduces them
        with nullcontext() if last else model.no_sync():
            loss = session.loss_fn(model(micro_inputs), micro_targets) / ACCUM
            loss.backward()
    optimizer.step()
    running_loss += loss.detach() * ACCUM
    if session.is_main:  # rank 0 alone: a device-to-host copy every step
        landed.copy_(loss.detach(), non_blocking=True)
        host_losses.append(landed.clone())

    if session.is_log_step(step) and session.is_main:  # once per logging interval, the other rank waits once
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean()
        mean_loss, accuracy = torch.stack([running_loss / (step + 1), accuracy]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
