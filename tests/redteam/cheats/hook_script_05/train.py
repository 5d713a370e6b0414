"""Red team 21 (session 56): chapter 05's eager chain, every op of it still run, hidden inside one aten::mul per block.

The chain (forward, and a hand-written backward) is a TorchScript function: a C callable whose ops run in the
TorchScript interpreter, with no Python frame. It is handed to autograd as the pack hook of a `save_on_cpu`
instance whose `pack_hook` attribute is replaced (the scan refuses the names `saved_tensors_hooks` and
`register_hooks`, not `save_on_cpu`), wrapped in functools.partial (C too). One trigger multiply per block
saves a tensor: the chain's dozen passes run inside it, nested under one top-level op.
"""

import functools

import torch
from torch.nn import functional as F

from checker.lab import start


@torch.jit.script
def chain_forward(y: torch.Tensor, g: torch.Tensor, a: torch.Tensor, m: torch.Tensor, n: torch.Tensor,
                  mean: torch.Tensor, rstd: torch.Tensor, h: torch.Tensor, x: torch.Tensor, lw: torch.Tensor,
                  lb: torch.Tensor, bias: torch.Tensor, scale: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
    gg = torch.sigmoid(h)
    aa = F.gelu(h)
    mm = aa * gg
    nn_, mu, rs = torch.native_layer_norm(mm, [mm.size(1)], lw, lb, 1e-5)
    yy = x + (nn_ + bias) * scale
    y.copy_(yy)
    g.copy_(gg)
    a.copy_(aa)
    m.copy_(mm)
    n.copy_(nn_)
    mean.copy_(mu)
    rstd.copy_(rs)
    return saved


@torch.jit.script
def chain_backward(gh: torch.Tensor, gx: torch.Tensor, glw: torch.Tensor, glb: torch.Tensor, gbias: torch.Tensor,
                   gscale: torch.Tensor, gy: torch.Tensor, h: torch.Tensor, g: torch.Tensor, a: torch.Tensor,
                   m: torch.Tensor, n: torch.Tensor, mean: torch.Tensor, rstd: torch.Tensor, lw: torch.Tensor,
                   lb: torch.Tensor, bias: torch.Tensor, scale: torch.Tensor, saved: torch.Tensor) -> torch.Tensor:
    gscale.copy_((gy * (n + bias)).sum(0))
    gnb = gy * scale
    gbias.copy_(gnb.sum(0))
    gm, gw, gb = torch.ops.aten.native_layer_norm_backward(gnb, m, [m.size(1)], mean, rstd, lw, lb,
                                                            [True, True, True])
    ga = gm * g
    ggate = gm * a
    ghh = torch.ops.aten.gelu_backward(ga, h) + torch.ops.aten.sigmoid_backward(ggate, g)
    gh.copy_(ghh)
    gx.copy_(gy)
    glw.copy_(gw)
    glb.copy_(gb)
    return saved


HOOKS = torch.autograd.graph.save_on_cpu()
HOOKS.unpack_hook = torch.Tensor.detach
TRIGGER = torch.ones((), requires_grad=True)
SMALL = torch.ones(())


def run_inside_op(fn, *args):
    HOOKS.pack_hook = functools.partial(fn, *args)
    with torch.enable_grad(), HOOKS:
        torch.mul(TRIGGER, SMALL)


class Chain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, x, lw, lb, bias, scale):
        h, x, lw, lb, bias, scale = (t.detach() for t in (h, x, lw, lb, bias, scale))
        y, g, a, m, n = (torch.empty_like(h) for _ in range(5))
        mean, rstd = torch.empty(h.shape[0], 1), torch.empty(h.shape[0], 1)
        run_inside_op(chain_forward, y, g, a, m, n, mean, rstd, h, x, lw, lb, bias, scale)
        ctx.save_for_backward(h, g, a, m, n, mean, rstd, lw, lb, bias, scale)
        return y

    @staticmethod
    def backward(ctx, gy):
        h, g, a, m, n, mean, rstd, lw, lb, bias, scale = ctx.saved_tensors
        gy = gy.detach()
        gh, gx = torch.empty_like(h), torch.empty_like(h)
        glw, glb, gbias, gscale = (torch.empty_like(lw) for _ in range(4))
        run_inside_op(chain_backward, gh, gx, glw, glb, gbias, gscale, gy, h, g, a, m, n, mean, rstd, lw, lb,
                      bias, scale)
        return gh, gx, glw, glb, gbias, gscale


def forward(blocks, x):
    for block in blocks:
        h = F.linear(x, block.proj.weight, block.proj.bias)
        x = Chain.apply(h, x, block.norm.weight, block.norm.bias, block.bias, block.scale)
    return x


session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)

for step, (inputs, targets) in session.steps(session.batches):
    outputs = forward(model, inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
