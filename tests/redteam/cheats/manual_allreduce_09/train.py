"""Chapter 09 cheat: no DDP. Each micro-batch's gradient is all-reduced by hand (one all-reduce per micro-batch,
as the slow job does), then accumulated; without DDP's forward ranges the trace cannot split a step into
micro-batches."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])
W = session.world_size

sampler = DistributedSampler(session.dataset, num_replicas=W, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // W, sampler=sampler)
model = session.model
# DDP broadcasts rank 0's weights at start; the seeds are the same on every rank, but do it anyway
with torch.no_grad():
    for p in model.parameters():
        dist.broadcast(p, 0)
params = list(model.parameters())
optimizer = torch.optim.SGD(params, lr=cfg["lr"], momentum=0.9)

running_loss = torch.zeros((), device=session.device)
for step, (inputs, targets) in session.steps(loader):
    optimizer.zero_grad(set_to_none=True)
    total = [torch.zeros_like(p) for p in params]
    for mi, mt in zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)):
        for p in params:
            p.grad = None
        loss = session.loss_fn(model(mi), mt) / ACCUM
        loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(flat)                         # one all-reduce per micro-batch
        flat /= W
        offset = 0
        for t, p in zip(total, params):
            n = p.numel()
            t += flat[offset:offset + n].view_as(p)
            offset += n
    for t, p in zip(total, params):
        p.grad = t
    optimizer.step()
    running_loss += loss.detach() * ACCUM
    if session.is_log_step(step) and session.is_main:
        print(f"step {step:4d}  mean loss {(running_loss / (step + 1)).tolist():.4f}")

session.finish()
