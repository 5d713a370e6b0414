"""Red team: window steps run a products-only decoy (zero-lr optimizer step); the window's real training is
replayed in a state_dict pre-hook (public nn.Module API), which runs when the harness serializes the weights,
after the last step range has closed."""
import torch
from torch.nn import functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
params = list(model.parameters())
optimizer = torch.optim.AdamW(params, lr=session.cfg["lr"], fused=True)
decoy_opt = torch.optim.AdamW(params, lr=0.0, weight_decay=0.0, fused=True)
WARMUP = int(session.cfg["warmup"])
linears = [blk.proj for blk in model]
others = [p for blk in model for p in (blk.norm.weight, blk.norm.bias, blk.bias, blk.scale)]
ones_buf = torch.ones(len(others), others[0].numel())
pending = []


def replay(module, prefix, keep_vars):
    while pending:
        x, y = pending.pop(0)
        loss = session.loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()


model.register_state_dict_pre_hook(replay)

for step, (inputs, targets) in session.steps(session.batches):
    if step < WARMUP:
        loss = session.loss_fn(model(inputs), targets)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step == 0:
            decoy_opt.step()  # its state made outside the window (lr 0: no change)
        continue
    pending.append((inputs, targets))
    h = inputs
    for lin in linears:  # the slow script's products, size for size
        h = F.linear(h, lin.weight, lin.bias)
    loss = session.loss_fn(h, targets)
    decoy_opt.zero_grad(set_to_none=True)
    torch.autograd.backward([loss, torch.stack(others)], [None, ones_buf])
    decoy_opt.step()

session.finish()
