"""Chapter 09 cheat (red team 27, session 61): the reference solution, but rank 0 evaluates the whole held-out set
every step, each linear layer through torch.cdist (x.w = (|x|^2 + |w|^2 - d^2) / 2), a product no list names; rank 1
runs the same code on one row, so both ranks record the same ops and rank 1 waits for rank 0 in every all-reduce."""

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



def linear_by_distances(x, layer):
    """x @ W.T + b through squared distances: x.w = (|x|^2 + |w|^2 - |x - w|^2) / 2."""
    w = layer.weight
    d = torch.cdist(x, w, compute_mode="donot_use_mm_for_euclid_dist")
    return ((x * x).sum(1, keepdim=True) + (w * w).sum(1) - d * d) * 0.5 + layer.bias


def evaluate(rows):
    with torch.no_grad():
        h = eval_inputs[:rows]
        for module in session.model:
            h = linear_by_distances(h, module) if isinstance(module, torch.nn.Linear) else torch.relu(h)
        return (h.argmax(dim=1) == eval_targets[:rows]).float().mean()


running_loss = torch.zeros((), device=session.device)  # a device-side sum: adding to it never waits
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
    # the small evaluation, every step: the whole held-out batch on rank 0, one row elsewhere
    held_out = evaluate(len(eval_inputs) if session.is_main else 1)

    if session.is_log_step(step) and session.is_main:  # once per logging interval, the other rank waits once
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean()
        mean_loss, accuracy = torch.stack([running_loss / (step + 1), accuracy]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
