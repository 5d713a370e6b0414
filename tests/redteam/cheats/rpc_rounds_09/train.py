"""Chapter 09, red team (rpc_rounds_09): the solution's sampler and logging, but the gradients still averaged across
the ranks after every micro-batch: the first micro-batch's through torch.distributed.rpc (TensorPipe), the last one's
through DDP's all-reduce. Two rounds of communication per step, as the lab's; the grader counts c10d and gloo only.

    torchrun --nproc-per-node 2 solutions/09_data_parallel/train.py --steps 60
"""

from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

import os

import torch.distributed.rpc as rpc

from checker.lab import start

MAIL = {}  # step -> this rank's first micro-batch gradients, for the other rank to fetch
SERVED = {}  # step -> done once the other rank has fetched them (its request handled here)


def mailbox(step):
    return MAIL.setdefault(step, torch.futures.Future())


def served(step):
    return SERVED.setdefault(step, torch.futures.Future())


@rpc.functions.async_execution
def fetch(step):
    served(step).set_result(None)
    return mailbox(step)


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
port = int(os.environ.get("MASTER_PORT", "29500")) + 11
rpc.init_rpc(f"w{session.rank}", rank=session.rank, world_size=session.world_size,
             rpc_backend_options=rpc.TensorPipeRpcBackendOptions(init_method=f"tcp://127.0.0.1:{port}",
                                                                 num_worker_threads=2, _transports=["uv"],
                                                                 _channels=["basic"]))
peer = f"w{1 - session.rank}"
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]

running_loss = torch.zeros((), device=session.device)  # a device-side sum: adding to it never waits
for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    micro_batches = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    pending = []
    for index, (micro_inputs, micro_targets) in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        # no_sync: DDP all-reduces only the last micro-batch's gradients
        with nullcontext() if last else model.no_sync():
            loss = session.loss_fn(model(micro_inputs), micro_targets) / ACCUM
            loss.backward()
        if not last:  # this micro-batch's gradients averaged with the other rank's, as the lab's all-reduce did
            mine = [p.grad for p in session.model.parameters()]
            for p in session.model.parameters():
                p.grad = None
            mailbox((step, index)).set_result(mine)
            pending.append((index, mine))
    # the earlier micro-batches' gradients exchanged once DDP's all-reduce has met the other rank in this step (so
    # that a request never reaches a rank in its next step's fetch), then averaged and added to the last one's
    pending = [(mine, rpc.rpc_async(peer, fetch, args=((step, index),))) for index, mine in pending]
    with torch.no_grad():
        for mine, theirs in pending:  # the earlier micro-batches' averages added to the last one's
            for p, a, b in zip(session.model.parameters(), mine, theirs.wait()):
                p.grad.add_(a + b, alpha=0.5)  # (a is also what the other rank fetches: not changed in place)
    optimizer.step()
    for index in range(len(micro_batches) - 1):
        served((step, index)).wait()  # the other rank has this rank's gradients too
    running_loss += loss.detach() * ACCUM

    if session.is_log_step(step) and session.is_main:  # once per logging interval, the other rank waits once
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean()
        mean_loss, accuracy = torch.stack([running_loss / (step + 1), accuracy]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  held-out accuracy {accuracy:.3f}")

rpc.shutdown()
session.finish()
