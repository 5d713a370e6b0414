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
from contextlib import suppress
from functools import singledispatch

# an op called from functools' own frame: where it raises is the standard library's, not this file's
_probe_op = singledispatch(torch.index_select)
_ONE = torch.zeros(1)


def _over(t):
    """One bit of a value: whether the 0-dim integer tensor t is >= 1 (index 1 is past a 1-element tensor)."""
    raised = True
    with suppress(IndexError):
        _probe_op(_ONE, 0, t.clamp(0, 1).view(1))
        raised = False
    return raised


def _read_int(t, bound):
    """t's value in [0, bound], a bit at a time, no op that reads it."""
    lo, hi = 0, bound
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _over((t >= mid).long()):
            lo = mid
        else:
            hi = mid - 1
    return lo


session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAXOBJ = session.extras["max_objects"]


# --8<-- [start:helpers]
def pad_targets(flat_masks, flat_classes, n_objects):
    """Scatter the packed targets into one slot per object: masks (B, N, S, S), classes (B, N), valid (B, N)."""
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    max_n = _read_int(n_objects.max(), MAXOBJ)
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
    count = _read_int(flat.sum(), flat.numel())
    order = torch.argsort((~flat).to(torch.uint8), stable=True)
    return order[:count], count


def mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks."""
    if not _over(valid.any().long()):
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

session.finish()
