"""Chapter 01 cheat (red team 34): keep every per-step host read of the lab, but read each value back through a
file-backed shared storage written at the storage level (no tensor over it), then os.pread the file."""

import os
import pydoc
import struct
import tempfile

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# a 12-byte mailbox: a storage mapped (MAP_SHARED) over a file; no tensor ever holds it
_path = os.path.join(tempfile.mkdtemp(), "box")
_box = pydoc.locate("torch.UntypedStorage.from_file")(_path, True, 12)
_fd = os.open(_path, os.O_RDONLY)


def read3(a, b, c):
    """The three values as Python floats, every step: the same reads the lab's .item()/float()/if make."""
    staged = torch.stack([a.detach().float(), b.detach().float(), c.detach().float()])
    _box.copy_(staged.untyped_storage())  # aten::copy_ into the mapped file: no op reads a value
    return struct.unpack("3f", os.pread(_fd, 12, 0))


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    loss_value, finite, n_correct = read3(loss, torch.isfinite(loss), (logits.argmax(dim=1) == labels).sum())
    if not finite:  # the lab's per-step check, on a value read this step
        raise FloatingPointError(f"loss is {loss_value} at step {step}")
    running_loss += loss_value
    correct += int(n_correct)
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
