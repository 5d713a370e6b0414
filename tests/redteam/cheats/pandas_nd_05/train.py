"""Chapter 05 (red-team attempt pandas_nd_05, red team 32): the pointwise chain run in numpy arrays reached through pandas' array type, its tensors' bytes read out through torch.save to a buffer, inside an autograd Function with a hand-written backward.

The attempt's own first line: Chapter 05 lab: fewer passes over memory per step."""

import io
import math

import pandas
import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
blocks = list(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
ND = type(pandas.Series([0.0], dtype="float32").values)  # the array type, by its own object
SQRT1_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def host(t):
    """A fresh contiguous float32 tensor's values as an array: the legacy file format ends with its raw bytes."""
    buffer = io.BytesIO()
    torch.save(t, buffer, _use_new_zipfile_serialization=False)
    raw = buffer.getvalue()
    size = t.numel() * 4
    return ND(tuple(t.shape), dtype="float32", buffer=raw, offset=len(raw) - size).copy()


def back(a):
    return torch.tensor(a.astype("float32"))


def sig(z):
    return 1.0 / (1.0 + math.e ** (-z))


def erf(z):
    sign = ((z >= 0) * 2 - 1).astype("float32")
    z = abs(z)
    t = 1.0 / (1.0 + 0.3275911 * z)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return sign * (1.0 - poly * math.e ** (-z * z))


class Stack(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, small, *weights):
        sm = host(small)  # rows per block: norm.weight, norm.bias, bias, scale, proj.bias
        xa = host(x)
        xt = x
        saved = []
        for i, blk in enumerate(blocks):
            lw, lb, bias, scale, _ = sm[5 * i:5 * i + 5]
            h = host(torch.addmm(blk.proj.bias, xt, blk.proj.weight.t()))
            gate = sig(h)
            phi = 0.5 * (1.0 + erf(h * SQRT1_2))
            ge = h * phi
            m = ge * gate
            mean = m.mean(-1, keepdims=True)
            c = m - mean
            r = ((c * c).mean(-1, keepdims=True) + 1e-5) ** -0.5
            n0 = c * r
            t = n0 * lw + lb + bias
            saved.append((xt, h, gate, phi, ge, r, n0, t))
            xa = xa + t * scale
            xt = back(xa)
        ctx.saved, ctx.sm = saved, sm
        return xt

    @staticmethod
    def backward(ctx, gy):
        sm = ctx.sm
        g = host(gy.contiguous())
        grads_small = ND(sm.shape, dtype="float32")
        grads_w = [None] * len(blocks)
        for i in reversed(range(len(blocks))):
            blk = blocks[i]
            lw, lb, bias, scale, _ = sm[5 * i:5 * i + 5]
            xt, h, gate, phi, ge, r, n0, t = ctx.saved[i]
            grads_small[5 * i + 3] = (g * t).sum(0)
            dt = g * scale
            db = dt.sum(0)
            grads_small[5 * i + 2] = db
            grads_small[5 * i + 1] = db
            grads_small[5 * i + 0] = (dt * n0).sum(0)
            dn0 = dt * lw
            dm = r * (dn0 - dn0.mean(-1, keepdims=True) - n0 * (dn0 * n0).mean(-1, keepdims=True))
            dgelu = phi + h * INV_SQRT_2PI * math.e ** (-0.5 * h * h)
            dh = dm * (gate * dgelu + ge * gate * (1.0 - gate))
            grads_small[5 * i + 4] = dh.sum(0)
            dh_t = back(dh)
            grads_w[i] = dh_t.t().mm(xt)
            if i > 0 or ctx.needs_input_grad[0]:  # the batch itself needs no gradient
                g = g + host(dh_t.mm(blk.proj.weight))
        ctx.saved = None
        return (back(g) if ctx.needs_input_grad[0] else None, back(grads_small), *grads_w)


smalls = []
for blk in blocks:
    smalls += [blk.norm.weight, blk.norm.bias, blk.bias, blk.scale, blk.proj.bias]
weights = [blk.proj.weight for blk in blocks]


def forward(inputs):
    return Stack.apply(inputs, torch.stack(smalls), *weights)


for step, (inputs, targets) in session.steps(session.batches):
    outputs = forward(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
