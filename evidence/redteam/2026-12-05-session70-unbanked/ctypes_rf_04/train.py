"""Red team: no fusion; the backward's and optimizer's ops run with op recording switched off through ctypes
(a call the Python tracer never records), and the optimizer's Python calls are in-place methods and operator slots."""
import ctypes
import os

import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model

_lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
_sw = getattr(_lib, "_ZN2at20enableRecordFunctionEb")
_sw.argtypes = [ctypes.c_bool]
_sw.restype = None


class AdamW(torch.optim.Optimizer):
    def __init__(self, params, lr, weight_decay, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, weight_decay=weight_decay, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, wd, (b1, b2), eps = group["lr"], group["weight_decay"], group["betas"], group["eps"]
            for p in group["params"]:
                if p.grad is None:
                    continue
                st = self.state[p]
                if not st:
                    st["n"] = 0
                    st["m"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["v"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    st["d"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                st["n"] += 1
                n, m, v, g = st["n"], st["m"], st["v"], p.grad
                p.mul_(1 - lr * wd)
                m.lerp_(g, 1 - b1)
                v.mul_(b2).addcmul_(g, g, value=1 - b2)
                bc1 = 1 - b1 ** n
                bc2 = 1 - b2 ** n
                denom = st["d"]
                denom.zero_().add_(v).sqrt_()
                denom /= bc2 ** 0.5
                denom += eps
                p.addcdiv_(m, denom, value=-(lr / bc1))


optimizer = AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"])
optimizer.register_step_pre_hook(lambda *a: _sw(False))
optimizer.register_step_post_hook(lambda *a: _sw(True))

KEEP = ("AddmmBackward0", "MmBackward0")


def hide_backward(root):
    seen, stack = set(), [root]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        if node.name() not in KEEP:
            node.register_prehook(lambda grads: _sw(False))
        for nxt, _ in node.next_functions:
            stack.append(nxt)


for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    hide_backward(loss.grad_fn)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
