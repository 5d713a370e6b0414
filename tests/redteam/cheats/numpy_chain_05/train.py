"""Red team 20 (session 56): numpy_chain_05: chapter 05's lab, unfused, with each block's elementwise chain (sigmoid, gelu, multiply,
layer norm, bias, scale, residual) and its backward run pass by pass in numpy inside a custom autograd.Function.
The Linear layers, the loss and the fused AdamW stay PyTorch's, so the products (forward and inside the backward
nodes) and the optimizer step are the slow script's. numpy's passes record no aten op, so elementwise_kernels counts
only the products' bias sums, the loss and the optimizer. The trace's op coverage floor (15% of each step's time) is
met by a torch.randint in each Function call, an op the pass count leaves out (NOT_A_PASS) and step_work does not count.
"""

import math

import numpy as np
import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
# numpy views of the chain's parameters, made once: the fused AdamW updates them in place, so the views follow
VIEWS = {id(p): p.detach().numpy() for p in model.parameters()}
PAD = torch.Generator().manual_seed(0)
PAD_SIZE = 1 << 20

SQRT1_2 = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def erf(x):
    """Abramowitz and Stegun 7.1.26 in float64 (error under 1.5e-7)."""
    s = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    y = 1.0 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * np.exp(-a * a)
    return s * y


class Chain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, x, gamma, beta, bias, scale):
        H = h.detach().numpy().astype(np.float64)
        X = x.detach().numpy()
        G, B, BI, S = (VIEWS[id(t)].astype(np.float64) for t in (gamma, beta, bias, scale))
        g = 1.0 / (1.0 + np.exp(-H))
        phi = 0.5 * (1.0 + erf(H * SQRT1_2))
        e = H * phi
        m = e * g
        mu = m.mean(1, keepdims=True)
        var = ((m - mu) ** 2).mean(1, keepdims=True)
        rstd = 1.0 / np.sqrt(var + 1e-5)
        mh = (m - mu) * rstd
        n = mh * G + B
        o = n + BI
        y = (X + (o * S)).astype(np.float32)
        ctx.saved = (H, g, phi, e, mh, rstd, o, G, S)
        torch.randint(0, 2, (PAD_SIZE,), generator=PAD)  # coverage: an op that is not a pass
        return torch.from_numpy(y)

    @staticmethod
    def backward(ctx, dy):
        H, g, phi, e, mh, rstd, o, G, S = ctx.saved
        DY = dy.detach().numpy().astype(np.float64)
        do = DY * S
        dscale = (DY * o).sum(0)
        dbias = do.sum(0)
        dgamma = (do * mh).sum(0)
        dbeta = do.sum(0)
        dmh = do * G
        dm = rstd * (dmh - dmh.mean(1, keepdims=True) - mh * (dmh * mh).mean(1, keepdims=True))
        de = dm * g
        dg = dm * e
        dh = de * (phi + H * np.exp(-0.5 * H * H) * INV_SQRT_2PI) + dg * g * (1.0 - g)
        torch.randint(0, 2, (PAD_SIZE,), generator=PAD)  # coverage: an op that is not a pass
        f = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
        return f(dh), dy, f(dgamma), f(dbeta), f(dbias), f(dscale)


def forward(x):
    for block in model:
        h = block.proj(x)
        x = Chain.apply(h, x, block.norm.weight, block.norm.bias, block.bias, block.scale)
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
