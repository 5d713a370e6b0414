"""Chapter 09 (red-team attempt fused_eval_straggler_09): the lab's straggler kept. Rank 0 evaluates the model on
the whole held-out set in every step, and the other rank waits for it in every all-reduce.

The evaluation is out of the trace's count of products: every layer runs as torch._addmm_activation (bias + x @ W.T,
then ReLU, one op), which is not among kineto.SHAPED_OPS and on a CPU calls no aten::addmm inside itself; the head
runs the same way with a constant added to its bias so that ReLU keeps every logit (argmax is unchanged). So
rank_work's products per step and straggler's matrix-multiply FLOPs see only training. The accuracy stays a tensor
(read at logging steps only). What is left of the straggler in the trace is the evaluation's ~40 recorded ops per
step, beyond straggler's margin of 16: the waiting rank runs the same evaluation code on one held-out row in every
step, so the two ranks' op counts are equal and rank 1 pays microseconds for it. Rank 0's extra time is all inside
recorded ops, so no unseen host time grows either.
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
layers = [m for m in session.model if isinstance(m, torch.nn.Linear)]
LIFT = 1e4  # added to the head's bias: every logit stays positive through ReLU, the argmax is the same


def evaluate(x, y):
    """Held-out accuracy, a tensor: each layer one fused product + ReLU (the head lifted above zero)."""
    with torch.no_grad():
        for layer in layers[:-1]:
            x = torch._addmm_activation(layer.bias, x, layer.weight.t())
        head = layers[-1]
        logits = torch._addmm_activation(head.bias + LIFT, x, head.weight.t())
        return (logits.argmax(dim=1) == y).float().mean()


accuracy = torch.zeros(())

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

    # the lab's straggler: rank 0 evaluates the whole held-out set every step; rank 1 runs the same ops on one row
    rows = len(eval_inputs) if session.is_main else 1
    accuracy = evaluate(eval_inputs[:rows], eval_targets[:rows])
    if session.is_log_step(step) and session.is_main:
        mean_loss, shown = torch.stack([running_loss / (step + 1), accuracy]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {shown:.3f}")

session.finish()
