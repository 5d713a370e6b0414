"""Red-team: every block's small ops run eagerly, one kernel each as in the slow script, but called through
OpOverload._op_dk (one dispatch key's kernel), which skips the profiler's RecordFunction hook: no op is recorded."""
import torch
from torch._C import DispatchKey

from checker.lab import start

session = start("04_eager_microops")
aten = torch.ops.aten
CPU = DispatchKey.CPU


def k(op, *args):
    return op._op_dk(CPU, *args)  # the op's CPU kernel: no record, no autograd


def rowsum(t):
    """Sum over the rows by halving: adds of two halves viewed by as_strided (through the same road, unrecorded);
    a reduction's own kernel would record a fill_."""
    rows, width = t.shape
    if not t.is_contiguous() or t.storage_offset() or rows & (rows - 1):
        return k(aten.sum.dim_IntList, t, [0])
    while rows > 1:
        rows //= 2
        top = k(aten.as_strided.default, t, [rows, width], [width, 1], 0)
        bottom = k(aten.as_strided.default, t, [rows, width], [width, 1], rows * width)
        t = k(aten.add.Tensor, top, bottom)
    return k(aten.as_strided.default, t, [width], [1], 0)


class Norm(torch.autograd.Function):
    """The block's written-out layer norm with its weight and bias."""

    @staticmethod
    def forward(ctx, x, w, b):
        n, mean, rstd = k(aten.native_layer_norm.default, x, [x.shape[-1]], None, None, 1e-5)
        ctx.save_for_backward(x, n, mean, rstd, w)
        return k(aten.add.Tensor, k(aten.mul.Tensor, n, w), b)

    @staticmethod
    def backward(ctx, go):
        x, n, mean, rstd, w = ctx.saved_tensors
        d_w = rowsum(k(aten.mul.Tensor, go, n))
        d_b = rowsum(go)
        d_x = k(aten.native_layer_norm_backward.default, k(aten.mul.Tensor, go, w), x, [x.shape[-1]], mean, rstd,
                None, None, [True, False, False])[0]
        return d_x, d_w, d_b


class Post(torch.autograd.Function):
    """x + sigmoid(gate) * (z * sigmoid(z * slope)): the swish and the gated residual."""

    @staticmethod
    def forward(ctx, z, x, slope, gate):
        u = k(aten.mul.Tensor, z, slope)
        s = k(aten.sigmoid.default, u)
        a = k(aten.mul.Tensor, z, s)
        g = k(aten.sigmoid.default, gate)
        ctx.save_for_backward(z, s, a, g, slope)
        return k(aten.add.Tensor, x, k(aten.mul.Tensor, g, a))

    @staticmethod
    def backward(ctx, go):
        z, s, a, g, slope = ctx.saved_tensors
        d_gate = k(aten.sigmoid_backward.default, rowsum(k(aten.mul.Tensor, go, a)), g)
        d_a = k(aten.mul.Tensor, go, g)
        d_u = k(aten.sigmoid_backward.default, k(aten.mul.Tensor, d_a, z), s)  # d(a)/d(s) = z
        d_z = k(aten.add.Tensor, k(aten.mul.Tensor, d_a, s), k(aten.mul.Tensor, d_u, slope))
        d_slope = rowsum(k(aten.mul.Tensor, d_u, z))
        return d_z, go, d_slope, d_gate


layers = list(session.model)


def model(x):
    x = layers[0](x)
    for blk in layers[1:-1]:
        h = Norm.apply(x, blk.norm_weight, blk.norm_bias)
        x = Post.apply(blk.fc(h), x, blk.act_slope, blk.gate)
    return layers[-1](x)


optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"],
                              weight_decay=session.cfg["weight_decay"], fused=True)

for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
