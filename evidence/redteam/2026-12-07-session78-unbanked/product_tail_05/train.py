"""Chapter 05: the tail of each block (bias, scale, residual) and its backward written as in-place matrix products."""

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


def diag_of(s):
    """diag(s) by products: a zero matrix (a product of zeros), then s added on its diagonal."""
    d = torch.empty(WIDTH, WIDTH, device=dev)
    d.addmm_(ZERO_COL, ZERO_ROW, beta=0)
    d.as_strided((WIDTH, 1), (WIDTH + 1, 1)).addmm_(s.view(WIDTH, 1), ONE)
    return d


class Tail(torch.autograd.Function):
    """y = x + (h + bias) * scale, each step a matrix product into preallocated memory."""

    @staticmethod
    def forward(ctx, h, x, bias, scale):
        hb = torch.empty(ROWS, WIDTH, device=dev)
        hb.addmm_(h, EYE, beta=0)
        hb.addmm_(ONES_COL, bias.view(1, WIDTH))
        d = diag_of(scale)
        y = torch.empty(ROWS, WIDTH, device=dev)
        y.addmm_(x, EYE, beta=0)
        y.addmm_(hb, d)
        ctx.save_for_backward(hb, d)
        return y

    @staticmethod
    def backward(ctx, dy):
        hb, d = ctx.saved_tensors
        dh = torch.empty(ROWS, WIDTH, device=dev)
        dh.addmm_(dy, d, beta=0)
        db = torch.empty(1, WIDTH, device=dev)
        db.addmm_(ONES_ROW, dh, beta=0)
        g = torch.empty(WIDTH, WIDTH, device=dev)
        g.addmm_(hb.t(), dy, beta=0)
        ds = g.as_strided((WIDTH,), (WIDTH + 1,))
        return dh, dy, db.view(WIDTH), ds


def forward(x):
    for block in model:
        h = block.proj(x)
        gate = torch.sigmoid(h)
        h = F.gelu(h) * gate
        h = block.norm(h)
        x = Tail.apply(h, x, block.bias, block.scale)
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
