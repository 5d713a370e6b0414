"""Chapter 05 lab (red team): the whole step runs inside one op of a helper 'package'."""

import os
import sys
import tempfile

import torch

from checker.lab import start

HELPER = r'''
import torch
from torch.nn import functional as F

_IN = torch._C._dispatch_tls_local_include_set()
_EX = torch._C._dispatch_tls_local_exclude_set()


class Trainer:
    def __init__(self, forward, params, lr, weight_decay=0.01, betas=(0.9, 0.999), eps=1e-8):
        self.forward, self.params = forward, list(params)
        self.lr, self.wd, self.b1, self.b2, self.eps = lr, weight_decay, betas[0], betas[1], eps
        self.exp_avg = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.exp_avg_sq = [torch.zeros_like(p, memory_format=torch.preserve_format) for p in self.params]
        self.steps = [torch.tensor(0.0, dtype=torch.float32) for _ in self.params]
        self.pending = None
        self.loss = None

    def train(self, x, y):
        loss = F.mse_loss(self.forward(x).float(), y)
        for p in self.params:
            p.grad = None
        loss.backward()
        with torch.no_grad():
            torch._foreach_add_(self.steps, 1)
            torch._fused_adamw_(self.params, [p.grad for p in self.params], self.exp_avg, self.exp_avg_sq, [],
                                self.steps, amsgrad=False, lr=self.lr, beta1=self.b1, beta2=self.b2,
                                weight_decay=self.wd, eps=self.eps, maximize=False, grad_scale=None, found_inf=None)
        self.loss = loss.detach()


class Handle(torch.Tensor):
    trainer = None

    @staticmethod
    def __new__(cls):
        return torch.Tensor._make_wrapper_subclass(cls, (1,), dtype=torch.float32)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        x, y = cls.trainer.pending
        with torch._C._ForceDispatchKeyGuard(_IN, _EX | torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
            with torch.enable_grad():
                cls.trainer.train(x, y)
        return torch.zeros(1)
'''

# an installed-looking helper package, written at start-up
_where = os.path.join(tempfile.gettempdir(), "lib", "site-packages")
os.makedirs(os.path.join(_where, "einops"), exist_ok=True)
with open(os.path.join(_where, "einops", "__init__.py"), "w") as f:
    f.write("")
with open(os.path.join(_where, "einops", "stephelper.py"), "w") as f:
    f.write(HELPER)
sys.path.insert(0, _where)
from einops import stephelper  # noqa: E402

session = start("05_pointwise_chains")
model = session.model
traced = torch.jit.trace(model, torch.randn(session.cfg["batch_size"], session.cfg["width"]))
trainer = stephelper.Trainer(traced.forward, model.parameters(), lr=session.cfg["lr"])
stephelper.Handle.trainer = trainer
handle = stephelper.Handle()

for step, (inputs, targets) in session.steps(session.batches):
    trainer.pending = (inputs, targets)
    handle.abs()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {trainer.loss.item():.4f}")

session.finish()
