"""Chapter 01 red-team (rt54 hookread_01): the lab's per-step reads, all kept, made inside the backward pass.

Every step reads the loss and the accuracy count to the host, as the lab does, from a hook on the loss's gradient:
autograd runs it inside its `autograd::engine::evaluate_function` record, and Tensor.tolist is called from C
(map), so the Python tracer names no call and the read's aten::resolve_conj is held by the engine's record.
"""

import math

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
READ = []


def reader(values):
    def hook(grad):
        READ.append(list(map(torch.Tensor.tolist, [values]))[0])
        return grad
    return hook


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    loss.register_hook(reader(torch.stack([loss.detach(), (logits.detach().argmax(dim=1) == labels).sum().float()])))

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    value, hits = READ.pop()  # the loss and the count, on the host, every step
    running_loss += value
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")
    optimizer.step()

    correct += hits
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {value}")

session.finish()
