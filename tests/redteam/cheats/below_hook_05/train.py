"""Red-team: the chain's elementwise ops run eagerly, one pass each, but called through OpOverload._op_dk (the
dispatcher's call for one dispatch key), which runs the CPU kernel without the profiler's RecordFunction hook."""
import torch
from torch._C import DispatchKey

from checker.lab import start

session = start("05_pointwise_chains")
aten = torch.ops.aten
CPU = DispatchKey.CPU


def k(op, *args):
    return op._op_dk(CPU, *args)  # the op's CPU kernel: no record, no autograd


def rowsum(t):
    """Sum over the rows by halving (adds of two views): the reduction's own kernel records a fill_."""
    rows, width = t.shape
    while rows > 1:
        half = t.view(2, rows // 2, width)
        t = k(aten.add.Tensor, half[0], half[1])
        rows //= 2
    return t.view(width)


class Chain(torch.autograd.Function):
    """x + scale * (layer_norm(gelu(h) * sigmoid(h)) + bias), the slow script's passes, forward and backward."""

    @staticmethod
    def forward(ctx, h, x, ln_w, ln_b, bias, scale):
        s = k(aten.sigmoid.default, h)
        g = k(aten.gelu.default, h)
        p = k(aten.mul.Tensor, g, s)
        n, mean, rstd = k(aten.native_layer_norm.default, p, [p.shape[-1]], None, None, 1e-5)
        q = k(aten.add.Tensor, k(aten.mul.Tensor, n, ln_w), ln_b)
        r = k(aten.add.Tensor, q, bias)
        out = k(aten.add.Tensor, x, k(aten.mul.Tensor, r, scale))
        ctx.save_for_backward(h, s, g, p, n, mean, rstd, r, ln_w, scale)
        return out

    @staticmethod
    def backward(ctx, go):
        h, s, g, p, n, mean, rstd, r, ln_w, scale = ctx.saved_tensors
        d_r = k(aten.mul.Tensor, go, scale)
        d_scale = rowsum(k(aten.mul.Tensor, go, r))
        d_bias = rowsum(d_r)
        d_lnw = rowsum(k(aten.mul.Tensor, d_r, n))
        d_n = k(aten.mul.Tensor, d_r, ln_w)
        d_p = k(aten.native_layer_norm_backward.default, d_n, p, [p.shape[-1]], mean, rstd, None, None,
                [True, False, False])[0]
        d_h = k(aten.add.Tensor, k(aten.gelu_backward.default, k(aten.mul.Tensor, d_p, s), h),
                k(aten.sigmoid_backward.default, k(aten.mul.Tensor, d_p, g), s))
        return d_h, go, d_lnw, d_bias, d_bias, d_scale


def model(x):
    for blk in session.model:
        x = Chain.apply(blk.proj(x), x, blk.norm.weight, blk.norm.bias, blk.bias, blk.scale)
    return x


optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"], fused=True)

for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
