"""Cheat (moving work out of sight): chapter 04's eager step written out in this file and run as the Autograd
kernel of an obscure aten op registered under a library name built at run time, so the op count sees one op
(red team, 2026-11-26)."""
import math
import warnings

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("04_eager_microops")
model = session.model
params = list(model.parameters())
lr, wd, beta1, beta2, eps = session.cfg["lr"], session.cfg["weight_decay"], 0.9, 0.999, 1e-8
state = [(torch.zeros_like(p), torch.zeros_like(p)) for p in params]
count = [0]
current = {}


def block(x, nw, nb, fw, fb, slope, gate):
    mean = x.mean(dim=-1, keepdim=True)
    centered = x - mean
    variance = (centered * centered).mean(dim=-1, keepdim=True)
    h = centered * torch.rsqrt(variance + 1e-5)
    h = h * nw + nb
    h = F.linear(h, fw, fb)
    h = h * torch.sigmoid(h * slope)
    return x + torch.sigmoid(gate) * h


layers = list(model)
first = (layers[0].weight, layers[0].bias)
last = (layers[-1].weight, layers[-1].bias)
blocks = [(b.norm_weight, b.norm_bias, b.fc.weight, b.fc.bias, b.act_slope, b.gate) for b in layers[1:-1]]


def forward(x):
    x = F.linear(x, *first)
    for weights in blocks:
        x = block(x, *weights)
    return F.linear(x, *last)


def whole_step(token):
    inputs, labels = current["batch"]
    for p in params:
        p.grad = None
    loss = F.cross_entropy(forward(inputs), labels)
    loss.backward()
    count[0] += 1
    step = count[0]
    with torch.no_grad():
        for p, (m, v) in zip(params, state):
            g = p.grad
            p.mul_(1 - lr * wd)
            m.lerp_(g, 1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            bc1 = 1 - beta1 ** step
            bc2 = 1 - beta2 ** step
            denom = (v.sqrt() / math.sqrt(bc2)).add_(eps)
            p.addcdiv_(m, denom, value=-(lr / bc1))
    current["loss"] = loss.detach()
    return token.clone()


warnings.simplefilter("ignore")
envelope = torch.library.Library("at" + "en", "IMPL")
envelope.impl("_test_warn_in_autograd", whole_step, "Autograd")
token = torch.zeros(1)

for step, batch in session.steps(session.batches):
    current["batch"] = batch
    torch.ops.aten._test_warn_in_autograd(token)
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {current['loss'].item():.4f}")

session.finish()
