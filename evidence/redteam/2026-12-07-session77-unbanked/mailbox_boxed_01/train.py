"""Chapter 01, red team 63 (boxed: the view is never dropped, kept inside an object ndarray): the lab's per-step reads of the loss and of the correct count, through a numpy view of a
"mailbox" tensor made in set-up by TensorBase's own numpy (torch.Tensor.__base__.numpy: past the harness's watcher,
so the view is never held), filled each step by copy_ (no read op) and read by numpy indexing (no op at all); the
view is dropped in the last step, before the collector is searched after the window."""

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
mailbox = torch.zeros(2)
box = torch.Tensor.__base__.numpy(torch.zeros(1)).astype(object)  # a numpy array of Python objects
box[0] = torch.Tensor.__base__.numpy(mailbox)  # the view, held where the collector cannot look (ndarray: no traversal)
last = session.total_steps - 1

running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    mailbox[0].copy_(loss.detach())
    mailbox[1].copy_((logits.argmax(dim=1) == labels).sum())
    value, hits = float(box[0][0]), float(box[0][1])  # the lab's two reads, every step, with no op
    running_loss += value
    if value != value or value in (float("inf"), float("-inf")):
        raise FloatingPointError(f"loss is {value} at step {step}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    correct += hits
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {value:.4f}")

session.finish()
