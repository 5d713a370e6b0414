"""Red team rt54: chapter 05 without fusion: the chain's elementwise passes run as matrix products.

On a CPU, elementwise_kernels counts every top-level aten op "but views, products and allocations" (NOT_A_PASS),
and an op called inside another is not top-level. So each multiply of the chain is written as an einsum (whose mul
runs inside it), each add or subtract as an addmm/addr against an identity or a vector of ones, each reduction as an
einsum against a vector of 1/C: every one is still a full pass over the activation (more than one: a product with
an identity reads it, multiplies by zeros, and writes it), but none is counted. What is left counted per block:
sigmoid, gelu, layer norm, gelu's backward and two tiny vector adds. The forward and backward are written by hand in
one autograd.Function (autograd's own backward of an einsum would run its muls top-level). No torch.compile.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"], fused=True)

blocks = list(model)
C = blocks[0].proj.weight.shape[0]
EYE = torch.eye(C)
NEG_EYE = -torch.eye(C)
ONES_C = torch.ones(C)
INV_C = torch.full((C,), 1.0 / C)
flat = [t for b in blocks for t in (b.proj.weight, b.proj.bias, b.norm.weight, b.norm.bias, b.bias, b.scale)]
EPS = blocks[0].norm.eps


class Chain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, *ps):
        n = x.shape[0]
        ones_n = x.new_ones(n)
        saved = []
        for i in range(len(ps) // 6):
            W, bp, lnw, lnb, bias, scale = ps[6 * i:6 * i + 6]
            h = torch.addmm(bp, x, W.t())
            s = torch.sigmoid(h)
            g = F.gelu(h)
            u = torch.einsum("ij,ij->ij", g, s)
            y, _, rstd = torch.native_layer_norm(u, [C], None, None, EPS)
            a = torch.einsum("j,j->j", lnw, scale)
            c = lnb + bias
            cb = torch.einsum("j,j->j", c, scale)
            D = torch.einsum("j,jk->jk", a, EYE)
            out = torch.addr(torch.addmm(x, y, D), ones_n, cb)
            saved.append((x, h, s, g, y, rstd, a, c, D, W, lnw, scale))
            x = out
        ctx.saved = saved
        ctx.ones_n = ones_n
        return x

    @staticmethod
    def backward(ctx, dout):
        grads = []
        ones_n = ctx.ones_n
        for (x, h, s, g, y, rstd, a, c, D, W, lnw, scale) in reversed(ctx.saved):
            d_cb = torch.einsum("ij->j", dout)
            d_y = torch.mm(dout, D)
            d_a = torch.einsum("ij,ij->j", dout, y)
            d_lnw = torch.einsum("j,j->j", d_a, scale)
            d_c = torch.einsum("j,j->j", d_cb, scale)
            d_scale = torch.einsum("j,j->j", d_a, lnw) + torch.einsum("j,j->j", d_cb, c)
            m1 = torch.einsum("ij,j->i", d_y, INV_C)
            m2 = torch.einsum("ij,ij,j->i", d_y, y, INV_C)
            t = torch.addr(d_y, m1, ONES_C, alpha=-1)
            t2 = torch.einsum("ij,i->ij", y, m2)
            t3 = torch.addmm(t, t2, NEG_EYE)
            d_u = torch.einsum("ij,i->ij", t3, rstd.view(-1))
            d_g = torch.einsum("ij,ij->ij", d_u, s)
            d_s = torch.einsum("ij,ij->ij", d_u, g)
            d_h1 = torch.ops.aten.gelu_backward(d_g, h)
            one_minus_s = torch.addr(s, ones_n, ONES_C, beta=-1)
            d_h2 = torch.einsum("ij,ij,ij->ij", d_s, s, one_minus_s)
            d_h = torch.addmm(d_h1, d_h2, EYE)
            d_W = torch.mm(d_h.t(), x)
            d_bp = torch.einsum("ij->j", d_h)
            dout = torch.addmm(dout, d_h, W)
            grads.append((d_W, d_bp, d_lnw, d_c, d_c.clone(), d_scale))
        ctx.saved = None
        return (dout, *[t for block in reversed(grads) for t in block])


def forward(inputs):
    return Chain.apply(inputs, *flat)


# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    outputs = forward(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
