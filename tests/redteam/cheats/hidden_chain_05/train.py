"""Chapter 05 attempt: the pointwise chain kept pass by pass, but run in an array library the counts don't see."""

import math

import torch
from pandas.core.algorithms import np as xp  # the array library, by a name the scan does not look for

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)

SQRT_HALF = 1.0 / math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


def _erf(x):
    # Abramowitz-Stegun 7.1.26 is 1.5e-7; use a higher-precision rational form (W. J. Cody style) via erfc
    s = xp.sign(x)
    a = xp.abs(x)
    t = 1.0 / (1.0 + 0.5 * a)
    y = t * xp.exp(-a * a - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418 + t * (
        -0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587 + t * (-0.82215223 + t * 0.17087277)))))))))
    return (s * (1.0 - y)).astype(xp.float32)


def arr(t):
    return xp.from_dlpack(t.detach())


class Chain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, x, ln_w, ln_b, bias, scale):
        H, X = arr(h), arr(x)
        W, B, BI, S = arr(ln_w), arr(ln_b), arr(bias), arr(scale)
        g = 1.0 / (1.0 + xp.exp(-H))
        cdf = 0.5 * (1.0 + _erf(H * SQRT_HALF))
        ge = H * cdf
        a = ge * g
        mu = a.mean(axis=-1, keepdims=True)
        c = a - mu
        var = (c * c).mean(axis=-1, keepdims=True)
        rstd = 1.0 / xp.sqrt(var + 1e-5)
        n = c * rstd
        z = n * W + B + BI
        out = X + z * S
        ctx.saved = (H, g, cdf, ge, n, rstd, z, W, S)
        return torch.from_dlpack(out.astype(xp.float32))

    @staticmethod
    def backward(ctx, go):
        H, g, cdf, ge, n, rstd, z, W, S = ctx.saved
        GO = arr(go)
        d_scale = (GO * z).sum(axis=0)
        dz = GO * S
        d_bias = dz.sum(axis=0)
        d_lnb = d_bias
        d_lnw = (dz * n).sum(axis=0)
        dn = dz * W
        da = rstd * (dn - dn.mean(axis=-1, keepdims=True) - n * (dn * n).mean(axis=-1, keepdims=True))
        pdf = INV_SQRT_2PI * xp.exp(-0.5 * H * H)
        dge = cdf + H * pdf
        dh = da * (dge * g + ge * g * (1.0 - g))
        f = xp.float32
        return (torch.from_dlpack(dh.astype(f)), go, torch.from_dlpack(d_lnw.astype(f)), torch.from_dlpack(d_lnb.astype(f)),
                torch.from_dlpack(d_bias.astype(f)), torch.from_dlpack(d_scale.astype(f)))


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
