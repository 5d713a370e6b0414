"""Red team 20 (session 56): sac_policy_chain_05: chapter 05's lab, unfused and eager, with each block's elementwise chain (sigmoid, gelu,
multiply, layer norm, bias, scale, residual) and its backward hidden inside one `aten::empty` per call.

How: a custom autograd.Function per block. Its forward and backward put their tensors in a Python list and call
`torch.empty(0)` inside selective activation checkpointing's own dispatch mode (torch.utils.checkpoint's
create_selective_checkpoint_contexts). The mode's __torch_dispatch__ (torch's code, whose ops the grader excuses as
activation checkpointing's) calls the policy: a unittest.mock.Mock whose side_effect is
itertools.starmap(program, repeat((L, FLAGS))), so `next()` calls a TorchScript function from C, with no Python frame.
The TorchScript function runs the chain's eager ops pass by pass (forward, or native_layer_norm_backward, gelu_backward
and sigmoid_backward), nested inside the one top-level aten::empty, which is not a pass. The Linear layers, the loss
and the fused AdamW stay as they were, so the products (forward, and inside backward nodes) and the optimizer step
are the slow script's.
"""

import itertools
from typing import List
from unittest import mock

import torch
from torch.nn import functional as F
from torch.utils.checkpoint import create_selective_checkpoint_contexts

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)


@torch.jit.script
def program(L: List[torch.Tensor], flags: List[int]) -> bool:
    h, x, gamma, beta, bias, scale = L[0], L[1], L[2], L[3], L[4], L[5]
    g = torch.sigmoid(h)
    e = F.gelu(h)
    m = e * g
    width = h.size(1)
    n, mean, rstd = torch.native_layer_norm(m, [width], gamma, beta, 1e-5)
    o = n + bias
    if flags[0] == 0:
        L[6].copy_(x + o * scale)
    else:
        dy = L[6]
        do = dy * scale
        L[11].copy_((dy * o).sum(0))
        L[10].copy_(do.sum(0))
        dm, dgamma, dbeta = torch.ops.aten.native_layer_norm_backward(
            do, m, [width], mean, rstd, gamma, beta, [True, True, True])
        L[8].copy_(dgamma)
        L[9].copy_(dbeta)
        dh = torch.ops.aten.gelu_backward(dm * g, h) + torch.ops.aten.sigmoid_backward(dm * e, g)
        L[7].copy_(dh)
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


class Chain(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, x, gamma, beta, bias, scale):
        y = torch.empty_like(h)
        run_hidden([h, x, gamma, beta, bias, scale, y], 0)
        ctx.save_for_backward(h, x, gamma, beta, bias, scale)
        return y

    @staticmethod
    def backward(ctx, dy):
        h, x, gamma, beta, bias, scale = ctx.saved_tensors
        dh, dgamma, dbeta, dbias, dscale = (torch.empty_like(t) for t in (h, gamma, beta, bias, scale))
        run_hidden([h, x, gamma, beta, bias, scale, dy.contiguous(), dh, dgamma, dbeta, dbias, dscale], 1)
        return dh, dy, dgamma, dbeta, dbias, dscale


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
