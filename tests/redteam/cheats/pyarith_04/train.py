"""Chapter 04 lab: fewer launches per step.

Each block's small ops (the written-out layer norm, the swish, the gated residual) and their backward are done
with Python's own arithmetic on flat lists (map over the operator and math modules) inside one autograd.Function
per block, so PyTorch's dispatcher is entered only for the linear layers. The optimizer is the fused AdamW.
"""

import array
import math
import operator
from itertools import chain, repeat

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(
    model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"], fused=True,
)
B, W = int(session.cfg["batch_size"]), int(session.cfg["width"])


def L(t):
    values = t.tolist()
    return list(chain.from_iterable(values)) if t.dim() == 2 else values


def T(values, *shape):
    t = torch.frombuffer(array.array("f", values), dtype=torch.float32)
    return t.view(*shape) if len(shape) > 1 else t


def mul(a, b):
    return list(map(operator.mul, a, b))


def add(a, b):
    return list(map(operator.add, a, b))


def sub(a, b):
    return list(map(operator.sub, a, b))


def sigmoid(a):
    return list(map(operator.truediv, repeat(1.0), map(operator.add, repeat(1.0), map(math.exp, map(operator.neg, a)))))


def colsum(a):
    return [math.fsum(a[j::W]) for j in range(W)]


def rowsums(a):
    return [math.fsum(a[i * W:(i + 1) * W]) for i in range(B)]


def per_row(vec):  # one value per row, repeated across the row
    return list(chain.from_iterable(repeat(v, W) for v in vec))


class Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_t, nw_t, nb_t, weight, bias, slope_t, gate_t):
        x, small = L(x_t), L(torch.cat((nw_t, nb_t, slope_t, gate_t)))  # the block's vectors, read at once
        nw, nb, slope, gate = (small[k * W:(k + 1) * W] for k in range(4))
        nw, nb, slope = nw * B, nb * B, slope * B
        mean = per_row([s / W for s in rowsums(x)])
        centered = sub(x, mean)
        var = [s / W for s in rowsums(mul(centered, centered))]
        rstd = [1.0 / math.sqrt(v + 1e-5) for v in var]
        hn = mul(centered, per_row(rstd))
        y_t = T(add(mul(hn, nw), nb), B, W)
        h_t = F.linear(y_t, weight, bias)
        h = L(h_t)
        s = sigmoid(mul(h, slope))
        sw = mul(h, s)
        gs = sigmoid(gate)
        out = add(x, mul(sw, gs * B))
        ctx.save_for_backward(y_t, weight)
        ctx.lists = (hn, rstd, nw, h, s, sw, slope, gs)
        return T(out, B, W)

    @staticmethod
    def backward(ctx, go_t):
        y_t, weight = ctx.saved_tensors
        hn, rstd, nw, h, s, sw, slope, gs = ctx.lists
        go = L(go_t)
        d_gate = [a * g * (1.0 - g) for a, g in zip(colsum(mul(go, sw)), gs)]
        d_sw = mul(go, gs * B)
        ds = mul(s, list(map(operator.sub, repeat(1.0), s)))
        d_h = mul(d_sw, add(s, mul(mul(h, ds), slope)))
        d_slope = colsum(mul(mul(d_sw, ds), mul(h, h)))
        d_h_t = T(d_h, B, W)
        d_y = L(torch.mm(d_h_t, weight))
        d_w = torch.mm(d_h_t.t(), y_t)
        d_b = colsum(d_h)
        d_nw, d_nb = colsum(mul(d_y, hn)), colsum(d_y)
        d_hn = mul(d_y, nw)
        m1 = per_row([v / W for v in rowsums(d_hn)])
        m2 = per_row([v / W for v in rowsums(mul(d_hn, hn))])
        d_x = add(go, mul(per_row(rstd), sub(sub(d_hn, m1), mul(hn, m2))))
        return (T(d_x, B, W), T(d_nw), T(d_nb), d_w, T(d_b), T(d_slope), T(d_gate))


first, *blocks, last = list(model)


def forward(x):
    x = first(x)
    for b in blocks:
        x = Block.apply(x, b.norm_weight, b.norm_bias, b.fc.weight, b.fc.bias, b.act_slope, b.gate)
    return last(x)


# --8<-- [start:loop]
for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(forward(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
