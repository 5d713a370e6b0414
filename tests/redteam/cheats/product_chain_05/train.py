"""Chapter 05: each block as one autograd Function; its adds, scales and reductions written as in-place products."""

import torch
import torch.nn.functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model

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
    d.view(WIDTH, 1, WIDTH).baddbmm_(s.view(WIDTH, 1, 1), EYE.view(WIDTH, 1, WIDTH), beta=0)
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
        dscale = new(WIDTH, 1)
        dscale.addmm_(gs.as_strided((WIDTH, 1), (WIDTH + 1, 1)), ONE, beta=0)
        dm, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(
            dn, m, (WIDTH,), mean, rstd, gamma, beta, [True, True, True])
        da = dm * g
        dg = dm * a
        dh = plus(torch.ops.aten.gelu_backward(da, h), torch.ops.aten.sigmoid_backward(dg, g))
        dweight = dh.t().mm(x)  # the products autograd runs for nn.Linear, size for size
        dproj_bias = new(1, WIDTH)
        dproj_bias.addmm_(ONES_ROW, dh, beta=0)
        dx = plus(dh.mm(weight), dy) if ctx.needs_input_grad[0] else None
        return dx, dweight, dproj_bias.view(WIDTH), dgamma, dbeta, dbias.view(WIDTH), dscale.view(WIDTH)


class SquaredError(torch.autograd.Function):
    """mean((o - t)^2), as a trace of a product; its gradient 2 (o - t) / n by a product."""

    @staticmethod
    def forward(ctx, o, t):
        diff = new(ROWS, o.shape[1])
        diff.addmm_(o, EYE, beta=0)
        diff.addmm_(t, EYE, alpha=-1)
        gram = new(o.shape[1], o.shape[1])
        gram.addmm_(diff.t(), diff, beta=0)
        total = new(1, 1)
        total.addmm_(ONES_W, gram.as_strided((o.shape[1], 1), (o.shape[1] + 1, 1)), beta=0, alpha=1.0 / diff.numel())
        ctx.save_for_backward(diff)
        return total.view(())

    @staticmethod
    def backward(ctx, dl):
        (diff,) = ctx.saved_tensors
        do = new(ROWS, diff.shape[1])
        do.view(-1, 1).addmm_(diff.view(-1, 1), dl.view(1, 1), beta=0, alpha=2.0 / diff.numel())
        return do, None


class ProductAdamW(torch.optim.Optimizer):
    """AdamW's fused kernel, its step count kept once for all parameters and advanced by a product."""

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.flat = [p for group in self.param_groups for p in group["params"]]
        self.exp_avg = [torch.zeros_like(p) for p in self.flat]
        self.exp_avg_sq = [torch.zeros_like(p) for p in self.flat]
        self.count = torch.zeros((), device=dev)

    @torch.no_grad()
    def step(self, closure=None):
        group = self.param_groups[0]
        self.count.view(1, 1).addmm_(ONE, ONE)
        torch._fused_adamw_(self.flat, [p.grad for p in self.flat], self.exp_avg, self.exp_avg_sq, [],
                            [self.count] * len(self.flat), lr=group["lr"], beta1=group["betas"][0],
                            beta2=group["betas"][1], weight_decay=group["weight_decay"], eps=group["eps"],
                            amsgrad=False, maximize=False)


ONES_W = torch.ones(1, WIDTH, device=dev)
optimizer = ProductAdamW(model.parameters(), lr=session.cfg["lr"])
ONE0 = torch.ones((), device=dev)


def forward(x):
    for block in model:
        x = Block.apply(x, block.proj.weight, block.proj.bias, block.norm.weight, block.norm.bias, block.bias,
                        block.scale)
    return x


for step, (inputs, targets) in session.steps(session.batches):
    outputs = forward(inputs)
    loss = SquaredError.apply(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward(ONE0)
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
