"""Chapter 05 lab: fewer passes over memory.

Each block's chain (sigmoid gate, gelu, product, bias, scale, residual) and its backward are computed with
Python's own arithmetic on flat lists (map over the operator and math modules), then handed back as float32
tensors; the projection and the layer norm stay PyTorch's. A random draw keeps the step's dropout-style noise
buffer fresh each step.
"""

import array
import math
import operator
from itertools import repeat

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)

WIDTH = int(session.cfg["width"])
ROWS = int(session.cfg["batch_size"])
INV_SQRT2 = 1.0 / math.sqrt(2.0)
INV_SQRT2PI = 1.0 / math.sqrt(2.0 * math.pi)
NOISE = 6_000_000


def L(t):
    return t.reshape(-1).tolist()


def T(values, *shape):
    return torch.frombuffer(array.array("f", values), dtype=torch.float32).view(*shape)


def mul(a, b):
    return list(map(operator.mul, a, b))


def add(a, b):
    return list(map(operator.add, a, b))


def rows(vec):  # a per-column vector laid out for every row
    return vec * ROWS


def sigmoid(a):
    return list(map(operator.truediv, repeat(1.0), map(operator.add, repeat(1.0), map(math.exp, map(operator.neg, a)))))


def phi(a):  # the normal CDF
    return list(map(operator.mul, repeat(0.5), map(operator.add, repeat(1.0), map(math.erf, map(operator.mul, a, repeat(INV_SQRT2))))))


def pdf(a):
    return list(map(operator.mul, repeat(INV_SQRT2PI), map(math.exp, map(operator.mul, repeat(-0.5), map(operator.mul, a, a)))))


def colsum(a):
    return [math.fsum(a[j::WIDTH]) for j in range(WIDTH)]


class Chain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_t, w, b, ln_w, ln_b, bias, scale):
        h_t = F.linear(x_t, w, b)
        h = L(h_t)
        gate = sigmoid(h)
        cdf = phi(h)
        g = mul(h, cdf)
        p = mul(g, gate)
        p_t = T(p, ROWS, WIDTH)
        n_t, mean, rstd = torch.ops.aten.native_layer_norm(p_t, [WIDTH], ln_w, ln_b, 1e-5)
        n2 = add(L(n_t), rows(L(bias)))
        out = add(L(x_t), mul(n2, rows(L(scale))))
        ctx.save_for_backward(x_t, w, h_t, p_t, mean, rstd, ln_w, ln_b, scale)
        ctx.lists = (h, gate, cdf, g, n2)
        return T(out, ROWS, WIDTH)

    @staticmethod
    def backward(ctx, go_t):
        x_t, w, h_t, p_t, mean, rstd, ln_w, ln_b, scale = ctx.saved_tensors
        h, gate, cdf, g, n2 = ctx.lists
        go = L(go_t)
        d_n2 = mul(go, rows(L(scale)))
        d_scale = colsum(mul(go, n2))
        d_bias = colsum(d_n2)
        d_p_t, d_lnw, d_lnb = torch.ops.aten.native_layer_norm_backward(
            T(d_n2, ROWS, WIDTH), p_t, [WIDTH], mean, rstd, ln_w, ln_b, [True, True, True])
        d_p = L(d_p_t)
        d_g = mul(d_p, gate)
        d_gate = mul(d_p, g)
        gelu_grad = add(cdf, mul(h, pdf(h)))
        sig_grad = mul(gate, list(map(operator.sub, repeat(1.0), gate)))
        d_h = add(mul(d_g, gelu_grad), mul(d_gate, sig_grad))
        d_h_t = T(d_h, ROWS, WIDTH)
        d_w = torch.mm(d_h_t.t(), x_t)
        d_b = T(colsum(d_h), WIDTH)
        d_x = T(add(L(torch.mm(d_h_t, w)), go), ROWS, WIDTH) if ctx.needs_input_grad[0] else None
        return (d_x, d_w, d_b, d_lnw, d_lnb, T(d_bias, WIDTH), T(d_scale, WIDTH))


def forward(x):
    for block in model:
        x = Chain.apply(x, block.proj.weight, block.proj.bias, block.norm.weight, block.norm.bias, block.bias,
                        block.scale)
    return x


# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    noise = torch.randint(0, 2, (NOISE,), dtype=torch.uint8)
    outputs = forward(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
