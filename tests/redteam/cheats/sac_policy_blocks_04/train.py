"""Red team 20 (session 56): sac_policy_blocks_04: chapter 04's lab, uncompiled and eager, with every MicroBlock's small ops (the written-out
layer norm, the Linear, the swish, the gate and the residual) and their backward run one op at a time inside one
`aten::empty` per block and direction; the optimizer is the lesson's fused AdamW.

How: a custom autograd.Function per block. Its forward and backward put their tensors in a Python list and call
`torch.empty(0)` inside selective activation checkpointing's own dispatch mode (torch.utils.checkpoint's
create_selective_checkpoint_contexts). The mode's __torch_dispatch__ (torch's code, whose ops the grader excuses as
activation checkpointing's) calls the policy: a unittest.mock.Mock whose side_effect is
itertools.starmap(program, repeat((L, FLAGS))), so `next()` calls a TorchScript function from C, with no Python frame.
Its ops (the block's products too: F.linear forward, the two mm's of its backward inside the Function's backward
node) are nested in the one top-level aten::empty, out of launches_per_step's sight.
"""

import itertools
from typing import List
from unittest import mock

import torch
from torch.nn import functional as F
from torch.utils.checkpoint import create_selective_checkpoint_contexts

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              fused=True)


@torch.jit.script
def program(L: List[torch.Tensor], flags: List[int]) -> bool:
    x, nw, nb, w, b, slope, gate, a, z = L[0], L[1], L[2], L[3], L[4], L[5], L[6], L[7], L[8]
    mean = x.mean(dim=-1, keepdim=True)
    centered = x - mean
    variance = (centered * centered).mean(dim=-1, keepdim=True)
    rstd = torch.rsqrt(variance + 1e-5)
    hat = centered * rstd
    if flags[0] == 0:
        a.copy_(hat * nw + nb)
        z.copy_(F.linear(a, w, b))
    s = torch.sigmoid(z * slope)
    u = z * s
    g = torch.sigmoid(gate)
    if flags[0] == 0:
        L[9].copy_(x + g * u)
    else:
        dy = L[9]
        du = dy * g
        L[16].copy_((dy * u).sum(0) * g * (1 - g))
        ds = du * z
        dpre = ds * s * (1 - s)
        L[15].copy_((dpre * z).sum(0))
        dz = du * s + dpre * slope
        L[13].copy_(dz.t().mm(a))
        L[14].copy_(dz.sum(0))
        da = dz.mm(w)
        L[11].copy_((da * hat).sum(0))
        L[12].copy_(da.sum(0))
        dhat = da * nw
        dx = rstd * (dhat - dhat.mean(dim=-1, keepdim=True) - hat * (dhat * hat).mean(dim=-1, keepdim=True))
        L[10].copy_(dy + dx)
    return True


L: list = []
FLAGS = [0]
POLICY = mock.Mock(side_effect=itertools.starmap(program, itertools.repeat((L, FLAGS))))
INSIDE, _ = create_selective_checkpoint_contexts(POLICY)


def run_hidden(tensors, flag):
    L[:] = tensors
    FLAGS[0] = flag
    with INSIDE:
        torch.empty(0)  # the one top-level op; the program runs inside its dispatch
    L.clear()


class Block(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, nw, nb, w, b, slope, gate):
        y, a, z = torch.empty_like(x), torch.empty_like(x), torch.empty_like(x)
        run_hidden([x, nw, nb, w, b, slope, gate, a, z, y], 0)
        ctx.save_for_backward(x, nw, nb, w, b, slope, gate, a, z)
        return y

    @staticmethod
    def backward(ctx, dy):
        saved = ctx.saved_tensors
        grads = [torch.empty_like(t) for t in saved[:7]]
        run_hidden(list(saved) + [dy.contiguous()] + grads, 1)
        return tuple(grads)


first, *blocks, last = list(model)


def forward(x):
    x = first(x)
    for blk in blocks:
        x = Block.apply(x, blk.norm_weight, blk.norm_bias, blk.fc.weight, blk.fc.bias, blk.act_slope, blk.gate)
    return last(x)


for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(forward(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
