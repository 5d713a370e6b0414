"""Red team 19: chapter 05's lab (eager, unfused), its backward run inside a pack hook of autograd's saved-tensor
hooks while a throwaway product saves its inputs: the whole backward nests inside one aten::mul, so a count of
the top-level ops sees the forward's elementwise ops and not the backward's."""

import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
weight = torch.ones((), device=session.device, requires_grad=True)


def keep(saved):
    return saved


for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    with torch.autograd.graph.saved_tensors_hooks(torch.autograd.backward, keep):
        torch.mul(loss, weight)  # saving loss for the product's backward runs loss's backward
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
