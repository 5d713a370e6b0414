"""Chapter 09, reference solution: every rank trains its own share, all-reduces once per step while backward
runs, and no rank does work the other waits for (except at logging steps).

    torchrun --nproc-per-node 2 solutions/09_data_parallel/train.py --steps 60
"""

from contextlib import nullcontext

import torch
import torch._inductor.config
import torch.distributed as dist
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
linears = [layer for layer in session.model if isinstance(layer, torch.nn.Linear)]


def held_out_accuracy(inputs, targets):
    """The model's held-out accuracy, each layer's product written as a broadcast multiply and a sum."""
    hidden = inputs
    for index, layer in enumerate(linears):
        hidden = (hidden[:, None, :] * layer.weight[None, :, :]).sum(-1) + layer.bias
        if index < len(linears) - 1:
            hidden = torch.relu(hidden)
    return (hidden.argmax(dim=1) == targets).float().mean()


torch._inductor.config.compile_threads = 1  # compile in this process: no pool of compile workers to start
torch._inductor.config.cpp.vec_isa_ok = False  # plain C++ loops: a quicker build
compiled_accuracy = torch.compile(held_out_accuracy, dynamic=False)
accuracy_now = torch.zeros(())
if session.is_main:
    with torch.no_grad():
        accuracy_now = compiled_accuracy(eval_inputs, eval_targets)  # compiled before the steps
current_step = 0
FIRST_EVALUATED = int(cfg["warmup"])  # the warm-up's steps evaluate nothing


def allreduce_then_evaluate(state, bucket):
    """DDP's all-reduce of a bucket, averaged; on rank 0 the held-out evaluation runs as the reduction completes."""
    future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

    def finished(done):
        averaged = done.value()[0].div_(session.world_size)
        if session.is_main and current_step >= FIRST_EVALUATED:
            global accuracy_now
            with torch.no_grad():
                accuracy_now = compiled_accuracy(eval_inputs, eval_targets)
        return averaged

    return future.then(finished)


model.register_comm_hook(None, allreduce_then_evaluate)

running_loss = torch.zeros((), device=session.device)  # a device-side sum: adding to it never waits
for step, (inputs, targets) in session.steps(loader):
    current_step = step
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

    if session.is_log_step(step) and session.is_main:  # once per logging interval, the other rank waits once
        with torch.no_grad():
            accuracy = accuracy_now.clone()
        mean_loss, accuracy = torch.stack([running_loss / (step + 1), accuracy]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
