"""Red team 19: chapter 04's lab with the fused AdamW, its backward run inside a pack hook of autograd's
saved-tensor hooks while a throwaway product saves its inputs: one aten::mul holds every backward op, so the
top-level count of launches sees the forward and the optimizer only."""

import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              fused=True)
weight = torch.ones((), device=session.device, requires_grad=True)


def keep(saved):
    return saved


for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(torch.autograd.backward, keep):
        torch.mul(loss, weight)
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
