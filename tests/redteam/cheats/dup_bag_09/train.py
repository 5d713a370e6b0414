"""Red team: both ranks still train the whole global batch (the duplicated work stays). Each reads its own half
through the logged DataLoader (DistributedSampler) and trains it as usual; the other rank's half is taken straight
from the dataset's tensors and trained through the same parameters with each Linear written as a weighted
embedding-bag sum (no product op the rank's row count takes)."""

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])
W, R = session.world_size, session.rank
ds = session.dataset

sampler = DistributedSampler(ds, num_replicas=W, rank=R, shuffle=False)
loader = DataLoader(ds, batch_size=GLOBAL_BATCH // W, sampler=sampler)
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
steps_per_epoch = len(ds) // GLOBAL_BATCH


def bag_linear(x, weight, bias):
    n, k = x.shape
    index = torch.arange(k, device=x.device).repeat(n)
    offsets = torch.arange(0, n * k, k, device=x.device)
    return F.embedding_bag(index, weight.t(), offsets, mode="sum", per_sample_weights=x.reshape(-1)) + bias


def bag_forward(x):
    for layer in session.model:
        x = bag_linear(x, layer.weight, layer.bias) if isinstance(layer, torch.nn.Linear) else layer(x)
    return x


running_loss = torch.zeros((), device=session.device)
for step, (inputs, targets) in session.steps(loader):
    k = step % steps_per_epoch
    others = torch.arange(k * GLOBAL_BATCH, (k + 1) * GLOBAL_BATCH)
    others = others[(others - k * GLOBAL_BATCH) % W != R]  # the other ranks' positions of this global batch
    index = ds.order[others]  # unlogged
    o_inputs, o_targets = ds.inputs[index].to(session.device), ds.targets[index].to(session.device)
    optimizer.zero_grad(set_to_none=True)
    with model.no_sync():  # the other half first: its gradients accumulate into .grad, reduced with the last micro-batch
        (session.loss_fn(bag_forward(o_inputs), o_targets) / 2).backward()
    micro = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for i, (mi, mt) in enumerate(micro):
        with nullcontext() if i == len(micro) - 1 else model.no_sync():
            loss = session.loss_fn(model(mi), mt) / ACCUM / 2
            loss.backward()
    optimizer.step()
    running_loss += loss.detach() * ACCUM * 2
    if session.is_log_step(step) and session.is_main:
        print(f"step {step:4d}  mean loss {(running_loss / (step + 1)).tolist():.4f}")

session.finish()
