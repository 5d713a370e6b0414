"""Red team rt54: chapter 04's lab (eager model, unfused AdamW), with each window step's training run between the
harness's step ranges.

Between one step's range and the next, the harness checks that the model's weights are not in shared memory, by
calling ``model.named_parameters()`` (checker.candidate.session.shared_weights). An instance attribute of that name
runs the script's code there. Each window step stashes its batch and runs a decoy backward that stores a zero
gradient into every trainable tensor (one custom-Function node, one AccumulateGrad per tensor); the batch's real
training (eager forward, backward, foreach=False AdamW: ~700 top-level ops) runs at the next call of
named_parameters, outside every step range, where launches_per_step does not count. Warm-up steps (no call between
ranges) train in the step as the lab does.
"""

import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(
    model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
    foreach=False,
)
params = [p for p in model.parameters() if p.requires_grad]
zeros = [torch.zeros_like(p) for p in params]
filler = torch.randn(160, 160)
pending = []
busy = [False]


def train(batch):
    inputs, labels = batch
    with torch.enable_grad():  # the harness calls named_parameters under no_grad
        loss = session.loss_fn(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return loss


def train_pending():
    if pending and not busy[0]:
        busy[0] = True
        try:
            train(pending.pop())
        finally:
            busy[0] = False


_named = type(model).named_parameters


def named_parameters(*args, **kwargs):
    train_pending()
    return _named(model, *args, **kwargs)


model.named_parameters = named_parameters


class Touch(torch.autograd.Function):
    @staticmethod
    def forward(ctx, anchor, *ps):
        return anchor * 0.0

    @staticmethod
    def backward(ctx, grad):
        return (None, *zeros)


# --8<-- [start:loop]
for step, (inputs, labels) in session.steps(session.batches):
    train_pending()  # warm-up: nothing ran between the ranges, so train the last batch here
    pending.append((inputs, labels))
    torch.mm(filler, filler)  # keeps the step's time in recorded ops
    Touch.apply(filler[0, 0], *params).backward()  # a gradient into every trainable tensor
    if session.is_log_step(step):
        print(f"step {step:4d}")
# --8<-- [end:loop]

session.finish()
