"""Chapter 05 lab: fewer passes over memory.

Instead of torch.compile, each block's chain runs through oneDNN's linear-with-post-op primitive (the one
Inductor itself calls on CPUs), one call per elementwise op, with an identity weight, forward and backward
written by hand in an autograd.Function. The projection, the layer norm and the loss stay as they were.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)

WIDTH = int(session.cfg["width"])
ROWS = int(session.cfg["batch_size"])
EYE = torch.eye(WIDTH)
NEG_EYE = -EYE
ONES_BIAS = torch.ones(WIDTH)
ONES_ROW = torch.ones(1, ROWS)
ZEROS = torch.zeros(WIDTH, WIDTH)
lp = torch.ops.mkldnn._linear_pointwise


def unary(x, attr="none", bias=None, weight=EYE, algo=""):
    return lp(x, weight, bias, attr, [], algo)


def binary(x, other, op, weight=EYE, bias=None):
    return lp.binary(x, other, weight, bias, op)  # (x @ weight.T + bias) op other


def colsum(x):
    return lp(ONES_ROW[:, : x.shape[0]], x.t(), None, "none", [], "").view(-1)


class Chain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, b, ln_w, ln_b, bias, scale):
        h = F.linear(x, w, b)
        gate = unary(h, "sigmoid")
        g = unary(h, "gelu", algo="none")
        p = binary(g, gate, "mul")
        n, mean, rstd = torch.ops.aten.native_layer_norm(p, [WIDTH], ln_w, ln_b, 1e-5)
        n2 = unary(n, bias=bias)
        d = binary(EYE, EYE, "mul", weight=ZEROS, bias=scale)  # diag(scale)
        out = binary(n2, x, "add", weight=d)  # n2 * scale + x
        ctx.save_for_backward(x, w, h, gate, g, p, mean, rstd, n2, ln_w, ln_b, d)
        return out

    @staticmethod
    def backward(ctx, go):
        x, w, h, gate, g, p, mean, rstd, n2, ln_w, ln_b, d = ctx.saved_tensors
        d_n2 = unary(go, weight=d)
        d_scale = colsum(binary(go, n2, "mul"))
        d_bias = colsum(d_n2)
        d_p, d_lnw, d_lnb = torch.ops.aten.native_layer_norm_backward(
            d_n2, p, [WIDTH], mean, rstd, ln_w, ln_b, [True, True, True])
        d_g = binary(d_p, gate, "mul")
        d_gate = binary(d_p, g, "mul")
        t1 = torch.ops.aten.gelu_backward(d_g, h)
        sg = binary(gate, gate, "mul", weight=NEG_EYE, bias=ONES_BIAS)  # (1 - gate) * gate
        d_h = binary(t1, binary(sg, d_gate, "mul"), "add")
        d_w = torch.mm(d_h.t(), x)
        d_b = colsum(d_h)
        d_x = binary(torch.mm(d_h, w), go, "add") if ctx.needs_input_grad[0] else None
        return d_x, d_w, d_b, d_lnw, d_lnb, d_bias, d_scale


def forward(x):
    for block in model:
        x = Chain.apply(x, block.proj.weight, block.proj.bias, block.norm.weight, block.norm.bias, block.bias,
                        block.scale)
    return x


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
