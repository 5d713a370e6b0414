"""Chapter 05 lab: each op of the chain, forward and backward, is its own compiled kernel.

Each pass of the chain (sigmoid, gelu, multiply, layer norm, bias, scale, residual) and each pass of its backward
is compiled on its own (one generated loop per op: as many passes over the activation as eager), and the chain is
one autograd Function per block whose forward and backward call those kernels with autograd off.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)


def one(fn):
    return torch.compile(fn, dynamic=False)


# one compiled kernel per pass, one per call site (no shape is shared between sites, so no recompiles)
f_sigmoid = one(lambda h: torch.sigmoid(h))
f_gelu = one(lambda h: F.gelu(h))
f_mul_gate = one(lambda g, gate: g * gate)
f_norm = one(lambda m, w, b: torch.ops.aten.native_layer_norm(m, [m.shape[-1]], w, b, 1e-5))
f_bias = one(lambda n, bias: n + bias)
f_scale = one(lambda a, scale: a * scale)
f_residual = one(lambda x, s: x + s)
b_scale = one(lambda go, scale: go * scale)
b_scale_w = one(lambda go, a: go * a)
b_colsum = one(lambda t: t.sum(0))
b_colsum2 = one(lambda t: t.sum(0))
b_norm = one(lambda d, m, mean, rstd, w, b: torch.ops.aten.native_layer_norm_backward(
    d, m, [m.shape[-1]], mean, rstd, w, b, [True, True, True]))
b_mul_g = one(lambda d, gate: d * gate)
b_mul_gate = one(lambda d, g: d * g)
b_gelu = one(lambda d, h: torch.ops.aten.gelu_backward(d, h))
b_sigmoid = one(lambda d, gate: torch.ops.aten.sigmoid_backward(d, gate))
b_add = one(lambda a, b: a + b)


class Chain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, x, w, b, bias, scale):
        gate = f_sigmoid(h)
        g = f_gelu(h)
        m = f_mul_gate(g, gate)
        n, mean, rstd = f_norm(m, w, b)
        a = f_bias(n, bias)
        s = f_scale(a, scale)
        out = f_residual(x, s)
        ctx.save_for_backward(h, gate, g, m, mean, rstd, a, w, b, scale)
        return out

    @staticmethod
    def backward(ctx, go):
        h, gate, g, m, mean, rstd, a, w, b, scale = ctx.saved_tensors
        d_a = b_scale(go, scale)
        d_scale = b_colsum(b_scale_w(go, a))
        d_bias = b_colsum2(d_a)
        d_m, d_w, d_b = b_norm(d_a, m, mean, rstd, w, b)
        d_h = b_add(b_gelu(b_mul_g(d_m, gate), h), b_sigmoid(b_mul_gate(d_m, g), gate))
        return d_h, go, d_w, d_b, d_bias, d_scale


def forward(x):
    for blk in model:
        x = Chain.apply(blk.proj(x), x, blk.norm.weight, blk.norm.bias, blk.bias, blk.scale)
    return x


# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    if step == session.warmup - 1:  # compiled by now
        torch.compiler.set_stance("default", skip_guard_eval_unsafe=True)
    outputs = forward(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
