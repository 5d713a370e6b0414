"""Chapter 09 red team: gradients exchanged after EVERY micro-batch (the lab's waste kept), but sent point to point
as complex128 views of the float32 buffers, so each message counts a quarter of its float32 elements; one tiny
all-reduce per step gives the straggler check its collective."""

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])

sampler = DistributedSampler(session.dataset, num_replicas=session.world_size, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // session.world_size, sampler=sampler,
                    pin_memory=session.device.type == "cuda")
model = session.model
params = [p for p in model.parameters()]
optimizer = torch.optim.SGD(params, lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]

numel = sum(p.numel() for p in params)
padded = (numel + 3) // 4 * 4
mine = torch.zeros(padded, device=session.device)
theirs = torch.zeros(padded, device=session.device)
world = dist.group.WORLD
peer = 1 - session.rank
running_loss = torch.zeros(1, device=session.device)

for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    for p in params:
        p.grad = torch.zeros_like(p)
    for micro_inputs, micro_targets in zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)):
        loss = session.loss_fn(model(micro_inputs), micro_targets) / ACCUM
        grads = torch.autograd.grad(loss, params)
        torch.cat([g.reshape(-1) for g in grads], out=mine[:numel])
        # one exchange per micro-batch, as the lab's DDP without no_sync: 16-byte elements
        works = [world.send([mine.view(torch.complex128)], peer, 0), world.recv([theirs.view(torch.complex128)], peer, 0)]
        for w in works:
            w.wait()
        summed = (mine + theirs) / session.world_size
        offset = 0
        for p in params:
            p.grad += summed[offset:offset + p.numel()].view_as(p)
            offset += p.numel()
        running_loss += loss.detach() * ACCUM
    dist.all_reduce(running_loss)  # one element: the step's all-reduce
    optimizer.step()

    if session.is_log_step(step) and session.is_main:
        with torch.no_grad():
            accuracy = (model(eval_inputs).argmax(dim=1) == eval_targets).float().mean()
        print(f"step {step:4d}  loss {running_loss.item():.4f}  held-out accuracy {accuracy.item():.3f}")

session.finish()
