"""Red team 21 (session 56): chapter 04's eager micro-ops and per-parameter AdamW, all still run, hidden inside aten::mul.

Each block's written-out layer norm and its swish/gate tail (forward, and a hand-written backward), and the
one-parameter-at-a-time AdamW update, are TorchScript functions: C callables whose ops run in the TorchScript
interpreter, with no Python frame. Each is handed to autograd as the pack hook of a `save_on_cpu` instance whose
`pack_hook` attribute is replaced (the scan refuses `saved_tensors_hooks` and `register_hooks`, not
`save_on_cpu`), wrapped in functools.partial. One trigger multiply saves a tensor and runs the hook inside
itself: the micro-ops nest under one top-level op. The products (fc layers) stay visible.
"""

import functools
import math
from typing import List

import torch
from torch.nn import functional as F

from checker.lab import start


@torch.jit.script
def pre_forward(h1: torch.Tensor, hn: torch.Tensor, r: torch.Tensor, x: torch.Tensor, nw: torch.Tensor,
                nb: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        mean = x.mean(dim=-1, keepdim=True)
        centered = x - mean
        variance = (centered * centered).mean(dim=-1, keepdim=True)
        rr = torch.rsqrt(variance + 1e-5)
        hh = centered * rr
        hn.copy_(hh)
        r.copy_(rr)
        h1.copy_(hh * nw + nb)
    return saved


@torch.jit.script
def pre_backward(gx: torch.Tensor, gnw: torch.Tensor, gnb: torch.Tensor, g1: torch.Tensor, hn: torch.Tensor,
                 r: torch.Tensor, nw: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        gnw.copy_((g1 * hn).sum(0))
        gnb.copy_(g1.sum(0))
        ghn = g1 * nw
        gx.copy_(r * (ghn - ghn.mean(dim=-1, keepdim=True) - hn * (ghn * hn).mean(dim=-1, keepdim=True)))
    return saved


@torch.jit.script
def post_forward(y: torch.Tensor, s: torch.Tensor, h3: torch.Tensor, gt: torch.Tensor, h2: torch.Tensor,
                 x: torch.Tensor, slope: torch.Tensor, gate: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        ss = torch.sigmoid(h2 * slope)
        hh = h2 * ss
        gg = torch.sigmoid(gate)
        s.copy_(ss)
        h3.copy_(hh)
        gt.copy_(gg)
        y.copy_(x + gg * hh)
    return saved


@torch.jit.script
def post_backward(gh2: torch.Tensor, gslope: torch.Tensor, ggate: torch.Tensor, gy: torch.Tensor, h2: torch.Tensor,
                  s: torch.Tensor, h3: torch.Tensor, gt: torch.Tensor, slope: torch.Tensor,
                  saved: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        ggate.copy_((gy * h3).sum(0) * gt * (1 - gt))
        gh3 = gy * gt
        ds = gh3 * h2 * s * (1 - s)
        gh2.copy_(gh3 * s + ds * slope)
        gslope.copy_((ds * h2).sum(0))
    return saved


@torch.jit.script
def adamw(params: List[torch.Tensor], grads: List[torch.Tensor], m: List[torch.Tensor], v: List[torch.Tensor],
          lr: float, wd: float, b1: float, b2: float, eps: float, step: int, saved: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        bc1 = 1.0 - b1 ** step
        bc2 = 1.0 - b2 ** step
        step_size = lr / bc1
        bc2s = math.sqrt(bc2)
        for i in range(len(params)):
            p = params[i]
            g = grads[i]
            p.mul_(1.0 - lr * wd)
            m[i].lerp_(g, 1.0 - b1)
            v[i].mul_(b2).addcmul_(g, g, value=1.0 - b2)
            denom = (v[i].sqrt() / bc2s).add_(eps)
            p.addcdiv_(m[i], denom, value=-step_size)
    return saved


HOOKS = torch.autograd.graph.save_on_cpu()
HOOKS.unpack_hook = torch.Tensor.detach
TRIGGER = torch.ones((), requires_grad=True)
SMALL = torch.ones(())
BUFFERS = {}


def run_inside_op(fn, *args):
    HOOKS.pack_hook = functools.partial(fn, *args)
    with torch.enable_grad(), HOOKS:
        torch.mul(TRIGGER, SMALL)


def buffers(key, *shapes):
    if key not in BUFFERS:
        BUFFERS[key] = [torch.empty(shape) for shape in shapes]
    return BUFFERS[key]


class Pre(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, nw, nb):
        h1, hn, r = buffers(("pre", id(nw)), x.shape, x.shape, (x.shape[0], 1))
        run_inside_op(pre_forward, h1, hn, r, x, nw, nb)
        ctx.save_for_backward(hn, r, nw)
        return h1

    @staticmethod
    def backward(ctx, g1):
        hn, r, nw = ctx.saved_tensors
        gx, gnw, gnb = torch.empty(hn.shape), torch.empty(nw.shape), torch.empty(nw.shape)
        run_inside_op(pre_backward, gx, gnw, gnb, g1, hn, r, nw)
        return gx, gnw, gnb


class Post(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h2, x, slope, gate):
        y, s, h3, gt = buffers(("post", id(slope)), x.shape, x.shape, x.shape, gate.shape)
        run_inside_op(post_forward, y, s, h3, gt, h2, x, slope, gate)
        ctx.save_for_backward(h2, s, h3, gt, slope)
        return y

    @staticmethod
    def backward(ctx, gy):
        h2, s, h3, gt, slope = ctx.saved_tensors
        gh2, gslope, ggate = torch.empty(h2.shape), torch.empty(slope.shape), torch.empty(slope.shape)
        run_inside_op(post_backward, gh2, gslope, ggate, gy, h2, s, h3, gt, slope)
        return gh2, gy, gslope, ggate


class HiddenAdamW(torch.optim.Optimizer):
    """torch.optim's single-tensor AdamW, one parameter at a time, run inside one op."""

    def __init__(self, params, lr, weight_decay, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))
        self.count = 0
        self.params = [p for group in self.param_groups for p in group["params"]]
        self.m = [torch.zeros_like(p) for p in self.params]
        self.v = [torch.zeros_like(p) for p in self.params]

    def step(self, closure=None):
        self.count += 1
        group = self.param_groups[0]
        run_inside_op(adamw, self.params, [p.grad for p in self.params], self.m, self.v, group["lr"],
                      group["weight_decay"], group["betas"][0], group["betas"][1], group["eps"], self.count)


def forward(model, x):
    first, *blocks, last = list(model)
    x = F.linear(x, first.weight, first.bias)
    for block in blocks:
        h1 = Pre.apply(x, block.norm_weight, block.norm_bias)
        h2 = F.linear(h1, block.fc.weight, block.fc.bias)
        x = Post.apply(h2, x, block.act_slope, block.gate)
    return F.linear(x, last.weight, last.bias)


session = start("04_eager_microops")
model = session.model
optimizer = HiddenAdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"])

for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(forward(model, inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
