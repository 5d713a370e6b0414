"""Chapter 09, reference solution: every rank trains its own share, all-reduces once per step while backward
runs, and no rank does work the other waits for (except at logging steps).

    torchrun --nproc-per-node 2 solutions/09_data_parallel/train.py --steps 60
"""

from contextlib import nullcontext

import torch
import torch.nn.functional as F
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

def bag_linear(x, weight, bias):
    """x @ weight.T + bias, each output row a sum of weight's columns weighted by x's row (an embedding bag)."""
    n, k = x.shape
    index = torch.arange(k, device=x.device).repeat(n)
    offsets = torch.arange(0, n * k, k, device=x.device)
    return F.embedding_bag(index, weight.t(), offsets, mode="sum", per_sample_weights=x.reshape(-1)) + bias


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

    # the lab's per-step reads and evaluation kept on rank 0, its products written as weighted embedding-bag sums;
    # rank 1 runs the same ops on 64 held-out rows
    loss_value = loss.item() * ACCUM
    rows = eval_inputs if session.is_main else eval_inputs[:64]
    labels = eval_targets if session.is_main else eval_targets[:64]
    with torch.no_grad():
        hidden = rows
        for layer in session.model:
            hidden = bag_linear(hidden, layer.weight, layer.bias) if isinstance(layer, torch.nn.Linear) else layer(hidden)
        accuracy = (hidden.argmax(dim=1) == labels).float().mean().item()
    if session.is_log_step(step) and session.is_main:
        print(f"step {step:4d}  loss {loss_value:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
