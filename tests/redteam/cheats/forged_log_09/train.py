"""Chapter 09 cheat: the slow job's loader (no sampler: every rank reads and trains the whole global batch), with a
collate_fn that rewrites the dataset's read log before the harness takes it, leaving only this rank's half."""

from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, default_collate

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])
W, R = session.world_size, session.rank
ds = session.dataset


def collate(samples):
    ds.read[:] = ds.read[R::W]          # what the log will say this rank read
    return default_collate(samples)


loader = DataLoader(ds, batch_size=GLOBAL_BATCH, collate_fn=collate)
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)

running_loss = torch.zeros((), device=session.device)
for step, (inputs, targets) in session.steps(loader):
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
