"""Chapter 01 lab, with a per-step read of the loss and the count kept (session 73: warnc_01, red team 55's warnbits_01 by another road).

torch._saturate_weight_to_fp16 warns (a Python warning) when any value lies beyond float16's range: whether it
warned is one bit of the value, read with no op a CPU trace counts. A bisection over scaled copies reads the loss to
float32's precision and the count exactly."""

import warnings

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
FP16_MAX = 65504.0


# every saturation warning is counted here, set up before the first step (a filter changed inside a step raises and
# catches a ValueError in the standard library, which the harness counts as an op's error)
_seen = []
warnings._showwarnmsg = _seen.append   # a C callable: no Python frame shows the warning
warnings.filterwarnings("always", message=".*out of range")


def above(t, bound):
    """Whether the scalar tensor t is above bound: the warning lands in a list with no Python frame."""
    before = len(_seen)
    torch._saturate_weight_to_fp16((t * (FP16_MAX / bound)).reshape(1, 1))
    return len(_seen) != before


def peek(t, lo=1e-6, hi=1e4, rounds=40):
    """A positive scalar tensor's value, by bisection on whether it is above each guess."""
    t = t.detach().float()
    for _ in range(rounds):
        mid = (lo + hi) / 2
        if above(t, mid):
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = peek(loss)  # the loss on the host, every step
    running_loss += value
    if not value < 1e4:
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += round(peek((logits.argmax(dim=1) == labels).sum() + 1, lo=0.5, hi=labels.shape[0] + 1.5, rounds=8)) - 1
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {loss}")

session.finish()
