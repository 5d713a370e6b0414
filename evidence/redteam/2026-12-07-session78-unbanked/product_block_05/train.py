"""Chapter 05: each block as one autograd Function; its adds, scales and reductions written as in-place products."""

import torch
import torch.nn.functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)

WIDTH = model[0].bias.shape[0]
ROWS = int(session.cfg["batch_size"])
dev = session.device
EYE = torch.eye(WIDTH, device=dev)
ONES_COL = torch.ones(ROWS, 1, device=dev)
ONES_ROW = torch.ones(1, ROWS, device=dev)
ZERO_COL = torch.zeros(WIDTH, 1, device=dev)
ZERO_ROW = torch.zeros(1, WIDTH, device=dev)
ONE = torch.ones(1, 1, device=dev)


def new(rows, cols):
    return torch.empty(rows, cols, device=dev)


def diag_of(s):
    """diag(s) by products: a zero matrix (a product of zeros), then s added on its diagonal."""
    d = new(WIDTH, WIDTH)
    d.addmm_(ZERO_COL, ZERO_ROW, beta=0)
    d.as_strided((WIDTH, 1), (WIDTH + 1, 1)).addmm_(s.view(WIDTH, 1), ONE)
    return d


def plus(u, v):
    """u + v as two products into new memory."""
    out = new(ROWS, WIDTH)
    out.addmm_(u, EYE, beta=0)
    out.addmm_(v, EYE)
    return out


class Block(torch.autograd.Function):
    """x + scale * (layer_norm(gelu(proj(x)) * sigmoid(proj(x))) + bias)."""

    @staticmethod
    def forward(ctx, x, weight, proj_bias, gamma, beta, bias, scale):
        h = torch.addmm(proj_bias, x, weight.t())  # the block's product, as nn.Linear runs it
        g = torch.sigmoid(h)
        a = F.gelu(h)
        m = a * g
        n, mean, rstd = torch.native_layer_norm(m, (WIDTH,), gamma, beta, 1e-5)
        hb = new(ROWS, WIDTH)
        hb.addmm_(n, EYE, beta=0)
        hb.addmm_(ONES_COL, bias.view(1, WIDTH))
        d = diag_of(scale)
        y = new(ROWS, WIDTH)
        y.addmm_(x, EYE, beta=0)
        y.addmm_(hb, d)
        ctx.save_for_backward(x, weight, gamma, beta, h, g, a, m, mean, rstd, hb, d)
        return y

    @staticmethod
    def backward(ctx, dy):
        x, weight, gamma, beta, h, g, a, m, mean, rstd, hb, d = ctx.saved_tensors
        dn = new(ROWS, WIDTH)
        dn.addmm_(dy, d, beta=0)
        dbias = new(1, WIDTH)
        dbias.addmm_(ONES_ROW, dn, beta=0)
        gs = new(WIDTH, WIDTH)
        gs.addmm_(hb.t(), dy, beta=0)
        dscale = gs.as_strided((WIDTH,), (WIDTH + 1,))
        dm, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(
            dn, m, (WIDTH,), mean, rstd, gamma, beta, [True, True, True])
        da = dm * g
        dg = dm * a
        dh = plus(torch.ops.aten.gelu_backward(da, h), torch.ops.aten.sigmoid_backward(dg, g))
        dweight = dh.t().mm(x)  # the products autograd runs for nn.Linear, size for size
        dproj_bias = new(1, WIDTH)
        dproj_bias.addmm_(ONES_ROW, dh, beta=0)
        dx = plus(dh.mm(weight), dy) if ctx.needs_input_grad[0] else None
        return dx, dweight, dproj_bias.view(WIDTH), dgamma, dbeta, dbias.view(WIDTH), dscale


def forward(x):
    for block in model:
        x = Block.apply(x, block.proj.weight, block.proj.bias, block.norm.weight, block.norm.bias, block.bias,
                        block.scale)
    return x


for step, (inputs, targets) in session.steps(session.batches):
    outputs = forward(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
