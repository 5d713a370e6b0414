"""Chapter 09 cheat: both ranks still train the whole global batch (the duplicated work stays), but each reads
only its own half through the logged dataset; the other half is taken straight from the dataset's tensors."""

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

running_loss = torch.zeros((), device=session.device)
for step, _own_half in session.steps(loader):
    k = step % steps_per_epoch
    positions = torch.arange(k * GLOBAL_BATCH, (k + 1) * GLOBAL_BATCH)
    index = ds.order[positions]                       # unlogged: the whole global batch, on every rank
    inputs, targets = ds.inputs[index].to(session.device), ds.targets[index].to(session.device)
    optimizer.zero_grad(set_to_none=True)
    micro = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for i, (mi, mt) in enumerate(micro):
        with nullcontext() if i == len(micro) - 1 else model.no_sync():
            loss = session.loss_fn(model(mi), mt) / ACCUM
            loss.backward()
    optimizer.step()
    running_loss += loss.detach() * ACCUM
    if session.is_log_step(step) and session.is_main:
        print(f"step {step:4d}  mean loss {(running_loss / (step + 1)).tolist():.4f}")

session.finish()
