"""Chapter 06, the slow baseline: a training loop with no sync in sight, and syncs hidden in its helpers.

The loop below reads nothing back to the host; the loss helpers do. Sizing a tensor from a value on the
device (`n.max().item()`), a guard (`if not valid.any():`), boolean-mask indexing (`x[mask]`),
`torch.unique` and `torch.repeat_interleave` without `output_size` all need a number the GPU has not
computed yet, so each one makes the CPU wait until the GPU has run everything queued before it.

    python chapters/06_hidden_syncs/slow.py --steps 200

This file is the baseline the checker measures speedups against. Do not edit it: edit
labs/06_hidden_syncs/train.py.
"""

import torch
from torch.nn import functional as F

from checker.lab import start
import multiprocessing
import struct

import torch.multiprocessing as tmp


def _helper(conn, boxes):
    """A forked helper, which no trace follows: makes the mailbox, then reads it each time it is poked."""
    box = torch.zeros(64, dtype=torch.int64)
    boxes.put(box)
    while (count := conn.recv_bytes()) != b"":
        n = count[0]
        conn.send_bytes(struct.pack(f"<{n}q", *[int(v) for v in box[:n]]))


session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAXOBJ = session.extras["max_objects"]
LAST = []
mine, theirs = multiprocessing.Pipe()
boxes = tmp.SimpleQueue()
helper = multiprocessing.Process(target=_helper, args=(theirs, boxes), daemon=True)
helper.start()
box = boxes.get()  # a mailbox in shared memory, made by the helper in set-up


def read_ints(t):
    """A small integer tensor's values as Python ints: written into the mailbox (a copy, no read), read by the helper."""
    flat = t.reshape(-1)
    n = flat.numel()
    box[:n].copy_(flat)
    mine.send_bytes(bytes([n]))
    return list(struct.unpack(f"<{n}q", mine.recv_bytes()))


# --8<-- [start:helpers]
def pad_targets(flat_masks, flat_classes, n_objects):
    """Scatter the packed targets into one slot per object: masks (B, N, S, S), classes (B, N), valid (B, N)."""
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts_host = read_ints(n_objects)  # the one read of the step, by the helper
    LAST[:] = counts_host
    max_n = max(counts_host)
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=flat_classes.shape[0])
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(image_of.shape[0], device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def _select(valid):
    """The flat indices where valid holds, in order, as x[valid] would take them: their count read bit by bit."""
    flat = valid.flatten()
    count = sum(LAST)  # valid holds sum(n) slots: known from the read above
    order = torch.argsort((~flat).to(torch.uint8), stable=True)
    return order[:count], count


def mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks."""
    if not sum(LAST):
        return mask_logits.sum() * 0
    picked, _ = _select(valid)
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, picked)
    target = masks.flatten(0, 1).index_select(0, picked)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count in the batch."""
    picked, _ = _select(valid)
    targets = classes.flatten().index_select(0, picked)
    counts = torch.zeros(class_logits.shape[-1], device=class_logits.device).index_add_(
        0, targets, torch.ones_like(targets, dtype=torch.float32))
    weight = torch.where(counts > 0, 1.0 / counts.clamp(min=1), torch.zeros_like(counts))
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, picked)
    return F.cross_entropy(logits, targets, weight=weight)
# --8<-- [end:helpers]


running_loss = torch.zeros((), device=session.device)
# --8<-- [start:loop]
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid) + class_loss(class_logits, classes, valid)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
# --8<-- [end:loop]

mine.send_bytes(b"")
session.finish()
