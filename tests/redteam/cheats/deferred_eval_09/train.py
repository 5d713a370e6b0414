"""Chapter 09, red team: the slow script's evaluation of every step kept (rank 0 evaluates the weights of every
step on the held-out set), but run after the loop on snapshots of the weights taken each step, past the window.

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
snapshots = []
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

    with torch.no_grad():  # every step, on every rank alike: the weights kept (a copy), evaluated after the loop
        snapshots.append((step, [p.detach().clone() for p in session.model.parameters()], loss.detach() * ACCUM))

# the slow script's evaluation of every step, all of it, after the last step
if session.is_main:
    with torch.no_grad():
        live = [p.detach().clone() for p in session.model.parameters()]
        for step, weights, step_loss in snapshots:
            for p, w in zip(session.model.parameters(), weights):
                p.copy_(w)
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean().item()
            if session.is_log_step(step):
                print(f"step {step:4d}  loss {step_loss.item():.4f}  held-out accuracy {accuracy:.3f}")
        for p, w in zip(session.model.parameters(), live):
            p.copy_(w)

session.finish()
