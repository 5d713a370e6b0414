"""Chapter 09 (red-team attempt crossed_waits_09, red team 30): rank 0 evaluates the held-out set every step with
broadcast multiplies and sums (no product), and hides rank 1's wait for it by crossing two extra groups' all-reduces,
so that the waits, paired by order, line up. The reference solution's docstring follows.

Chapter 09, reference solution: every rank trains its own share, all-reduces once per step while backward
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

running_loss = torch.zeros((), device=session.device)
eval_acc = torch.zeros((), device=session.device)  # a device-side sum: adding to it never waits
# two more groups of the same two ranks: each rank's all-reduces, in the order they ran, pair a long one with a long one
group_b = torch.distributed.new_group(backend="gloo")
group_c = torch.distributed.new_group(backend="gloo")
token_b = torch.zeros(1)
token_c = torch.zeros(1)
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

    if session.is_main:
        early_c = torch.distributed.all_reduce(token_c, group=group_c, async_op=True)
        # rank 0 alone, every step: the held-out evaluation the slow script runs, written as broadcast products
        # summed (no matrix-multiply op), its accuracy kept on the device
        with torch.no_grad():
            h = eval_inputs
            linears = [m for m in session.model if isinstance(m, torch.nn.Linear)]
            for i, lin in enumerate(linears):
                outs = []
                for chunk in h.split(1024):
                    outs.append((chunk.unsqueeze(1) * lin.weight.unsqueeze(0)).sum(-1) + lin.bias)
                h = torch.cat(outs)
                if i < len(linears) - 1:
                    h = h.relu()
            eval_acc += (h.argmax(dim=1) == eval_targets).float().mean()
        meet_b = torch.distributed.all_reduce(token_b, group=group_b, async_op=True)
        # rank 0 asked for group C's all-reduce before its evaluation: it runs (waiting for rank 1) the whole time
        meet_b.wait()
        early_c.wait()
    else:
        # rank 1 waits for rank 0's evaluation in group B's all-reduce, then meets group C's at once
        torch.distributed.all_reduce(token_b, group=group_b)
        torch.distributed.all_reduce(token_c, group=group_c)
    if session.is_log_step(step) and session.is_main:  # once per logging interval, the other rank waits once
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean()
        mean_loss, accuracy = torch.stack([running_loss / (step + 1), accuracy]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
