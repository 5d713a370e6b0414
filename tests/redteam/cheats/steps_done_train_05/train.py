"""Red team rt54: chapter 05's slow training (eager fp32 chain, no fusion), each step's training run between the
harness's step ranges.

Between one step's range and the next the harness counts the step done (``session.steps_done = step + 1``). A
property on that attribute (red team issue 43's between_ranges_06 used it for a read; that class was closed for
host syncs only: checker/trace/analyses/syncs.py counts the gaps between ranges, the op counts do not) runs the
step's real training there: the eager forward, backward and fused AdamW step, ~80 elementwise passes, outside every
step range. Inside the range the step stashes its batch and runs a decoy backward that stores a zero gradient into
every trainable tensor (the same-work rule's per-step count of gradients stored), plus one product to keep the
range's time in recorded ops. elementwise_kernels counts what is inside the ranges.
"""

import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
params = [p for p in model.parameters() if p.requires_grad]
zeros = [torch.zeros_like(p) for p in params]
filler = torch.randn(192, 192)
pending = []


def train_pending():
    while pending:
        inputs, targets = pending.pop(0)
        with torch.enable_grad():
            loss = session.loss_fn(model(inputs), targets)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
        optimizer.zero_grad(set_to_none=True)  # the decoy's gradients then land in empty slots


def _count_step(self, value):  # runs after each step's range closes, before the next one opens
    train_pending()
    self.__dict__["steps_done"] = value


type(session).steps_done = property(lambda self: self.__dict__.get("steps_done", 0), _count_step)


class Touch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, *ps):
        return anchor * 0.0

    @staticmethod
    def backward(ctx, grad):
        return (None, *[z.detach() for z in zeros])


# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    pending.append((inputs, targets))
    torch.mm(filler, filler)
    Touch.apply(filler[0, 0], *params).backward()
    if session.is_log_step(step):
        print(f"step {step:4d}")
# --8<-- [end:loop]
train_pending()

session.finish()
