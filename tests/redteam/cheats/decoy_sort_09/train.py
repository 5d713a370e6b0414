"""Chapter 09, reference solution: every rank trains its own share, all-reduces once per step while backward
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
# rank 0 tracks a weight statistic every step (the 99th percentile of |W| of the hidden layers, by a full sort);
# the other rank runs the same ops on small stand-ins
HIDDEN = [layer.weight for layer in session.model if isinstance(layer, torch.nn.Linear)][1:3]
STAND_INS = [torch.zeros_like(w) for w in HIDDEN]  # as many elements; already in order, so sorted fast
weight_p99 = torch.zeros(len(HIDDEN), device=session.device)


def weight_stats():
    mats = HIDDEN if session.rank == 0 else STAND_INS
    for i, w in enumerate(mats):
        ordered = torch.sort(w.detach().abs().flatten()).values
        weight_p99[i].copy_(ordered[int(0.99 * (ordered.shape[0] - 1))])
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
    weight_stats()

    if session.is_log_step(step) and session.is_main:  # once per logging interval
        mean_loss, p99_a, p99_b = torch.cat([(running_loss / (step + 1)).view(1), weight_p99]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  |W| p99 {p99_a:.4f} {p99_b:.4f}")

session.finish()
