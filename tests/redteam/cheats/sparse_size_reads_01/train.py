"""Chapter 01: still reads loss, its finiteness and the accuracy to the host every step, as a sparse tensor's nnz."""

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

SPAN = 200_001
POSITIONS = torch.arange(SPAN)


def host_int(count: torch.Tensor) -> int:
    """A non-negative integer tensor (< SPAN) as a Python int: the number of distinct indices after coalescing.
    On a GPU, coalesce() waits for the device to learn its nnz: the same drain as .item()."""
    idx = (POSITIONS + 1) * (POSITIONS < count.to(POSITIONS.device))
    s = torch.sparse_coo_tensor(idx.unsqueeze(0), torch.ones(SPAN), (SPAN + 1,)).coalesce()
    return s._nnz() - 1


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    finite = host_int(torch.isfinite(loss.detach()).long())
    if not finite:  # a host branch on the loss every step
        raise FloatingPointError(f"loss is not finite at step {step}")
    running_loss += host_int((loss.detach().clamp(0, 19.9) * 10_000).long()) / 10_000

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += host_int((logits.argmax(dim=1) == labels).sum())
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
