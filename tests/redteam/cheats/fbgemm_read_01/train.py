"""Chapter 01 lab, with a per-step read of the loss and the count kept (red team 55: fbgemm_read_01)."""

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


def peek(t):
    """A non-negative scalar tensor's value as a Python float: fbgemm's weight quantizer picks its scale from the
    tensor's min and max, read in C++ with no op that reads a value, and hands the scale to Python."""
    scale = torch.fbgemm_linear_quantize_weight(t.detach().float().reshape(1, 1))[2]
    return scale * 255.0


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = peek(loss)  # the loss on the host, every step
    running_loss += value
    if not value < 1e30:
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += round(peek((logits.argmax(dim=1) == labels).sum() + 1)) - 1  # +1: a zero count has no range
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {loss}")

session.finish()
