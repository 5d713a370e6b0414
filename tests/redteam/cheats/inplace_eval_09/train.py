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
EVAL_ROWS = 512  # a rolling held-out evaluation, every step, on every rank alike (so no rank waits for another)
eval_correct = torch.zeros((), device=session.device)
eval_seen = 0
LINEARS = [layer for layer in session.model if isinstance(layer, torch.nn.Linear)]
WEIGHTS_T = [layer.weight.t() for layer in LINEARS]  # live views: the optimizer updates the weights in place
EVAL_CHUNKS = list(zip(eval_inputs.split(EVAL_ROWS), eval_targets.split(EVAL_ROWS)))


def rolling_eval(step):
    """Accuracy of the current weights on the next EVAL_ROWS held-out samples of this rank."""
    global eval_seen
    x, y = EVAL_CHUNKS[(step * session.world_size + session.rank) % len(EVAL_CHUNKS)]
    with torch.no_grad():
        for i, layer in enumerate(LINEARS):
            out = torch.empty(x.shape[0], layer.out_features, device=x.device)
            out.addmm_(x, WEIGHTS_T[i], beta=0)  # in place: the same product as layer(x)
            out.add_(layer.bias)
            x = out
            if i < len(LINEARS) - 1:
                x.clamp_min_(0)
        eval_correct.add_((x.argmax(dim=1) == y).sum())
    eval_seen += EVAL_ROWS
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
    rolling_eval(step)

    if session.is_log_step(step) and session.is_main:  # once per logging interval, the other rank waits once
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean()
        mean_loss, accuracy = torch.stack([running_loss / (step + 1), accuracy]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {accuracy:.3f}  rolling")

session.finish()
