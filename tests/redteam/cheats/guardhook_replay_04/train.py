"""Red team: as replay_sd_04, but the replay runs in model.named_parameters(), which the harness calls when it walks the
model as the window closes: after the last step range, before the close message is stamped."""
import torch
from torch import nn
from torch.nn import functional as F

from checker.lab import start

session = start("04_eager_microops")
model = session.model
params = list(model.parameters())
optimizer = torch.optim.AdamW(params, lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"], foreach=False)
replay_opt = torch.optim.AdamW(params, lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"], fused=True)
decoy_opt = torch.optim.AdamW(params, lr=0.0, weight_decay=0.0, fused=True)
WARMUP = int(session.cfg["warmup"])
linears = [model[0]] + [blk.fc for blk in list(model)[1:-1]] + [model[-1]]
others = [p for blk in list(model)[1:-1] for p in (blk.norm_weight, blk.norm_bias, blk.act_slope, blk.gate)]
pending = []
ones_buf = torch.ones(len(others), others[0].numel())


class Fast(nn.Module):
    """The same function as the model's, in fewer eager ops, run by TorchScript (no Python frames): only the
    replay uses it, outside every step range."""

    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, x):
        m = self.m
        x = F.linear(x, m[0].weight, m[0].bias)
        for blk in list(m)[1:-1]:
            h = F.layer_norm(x, (x.shape[-1],), blk.norm_weight, blk.norm_bias, 1e-5)
            h = F.linear(h, blk.fc.weight, blk.fc.bias)
            h = h * torch.sigmoid(h * blk.act_slope)
            x = torch.addcmul(x, torch.sigmoid(blk.gate), h)
        return F.linear(x, m[-1].weight, m[-1].bias)


fast_forward = None


TRACE_STEPS = int(session.cfg["trace_steps"])


def replaying_named_parameters(*args, **kwargs):
    if len(pending) == TRACE_STEPS:
        # carry the honest optimizer's state over to the fused one (same AdamW math: same weights)
        for p in params:
            replay_opt.state[p] = optimizer.state[p]
        for x, y in pending:
            loss = session.loss_fn(fast_forward(x), y)
            replay_opt.zero_grad(set_to_none=True)
            loss.backward()
            replay_opt.step()
        pending.clear()
    return nn.Module.named_parameters(model, *args, **kwargs)


model.named_parameters = replaying_named_parameters

for step, (inputs, labels) in session.steps(session.batches):
    if step < WARMUP:
        if step == 0:
            fast_forward = torch.jit.trace(Fast(model), (inputs,))
        if step < 3:  # TorchScript's profiling runs, in warm-up: the gradients are cleared before the real step
            F.cross_entropy(fast_forward(inputs), labels).backward()
        loss = session.loss_fn(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step == 0:
            decoy_opt.step()  # its state made here, outside the window (lr 0: no change)
        continue
    pending.append((inputs, labels))
    h = inputs
    for lin in linears:  # the slow script's products, size for size
        h = F.linear(h, lin.weight, lin.bias)
    loss = F.cross_entropy(h, labels)
    aux = torch.stack(others)
    decoy_opt.zero_grad(set_to_none=True)
    torch.autograd.backward([loss, aux], [None, ones_buf])
    decoy_opt.step()  # lr 0: the weights stay where the window opened

session.finish()
