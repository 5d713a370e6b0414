"""Chapter 06 attempt: the lab's data-dependent helpers kept, every value they need read on the host by an
operator's bounds check instead of .item()/nonzero/unique (an IndexError is one bit)."""

import contextlib

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAX_OBJECTS = session.extras["max_objects"]
NUM_CLASSES = model.num_classes

_PROBES = [torch.zeros(k) for k in range(0, 17)]


def _below(t, k):
    """Is the 1-element integer tensor t < k ?  index_select checks its index on the CPU and raises if not."""
    with contextlib.suppress(IndexError):
        _PROBES[k].index_select(0, t)
        return True
    return False


def read_small(t, hi):
    """The value of a 1-element integer tensor in [0, hi], by binary search over bounds checks."""
    lo, top = 0, hi
    while lo < top:
        mid = (lo + top + 1) // 2
        if _below(t, mid):
            top = mid - 1
        else:
            lo = mid
    return lo


def read_vector(t, hi):
    flat = t.reshape(-1)
    return [read_small(flat.narrow(0, i, 1), hi) for i in range(flat.shape[0])]


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = read_vector(n_objects, MAX_OBJECTS)  # the host knows each image's count now
    max_n = max(counts)
    image_of = torch.tensor([b for b, n in enumerate(counts) for _ in range(n)], dtype=torch.long)
    slot_of = torch.tensor([s for n in counts for s in range(n)], dtype=torch.long)
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    chosen = [b * max_n + s for b, n in enumerate(counts) for s in range(n)]
    return masks, classes, valid, chosen


def mask_loss(mask_logits, masks, valid, chosen):
    if not chosen:  # the guard, decided on the host
        return mask_logits.sum() * 0
    idx = torch.tensor(chosen, dtype=torch.long)
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, idx)
    target = masks.flatten(0, 1).index_select(0, idx)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid, chosen, flat_classes):
    idx = torch.tensor(chosen, dtype=torch.long)
    targets = classes.flatten().index_select(0, idx)
    values = read_vector(flat_classes, NUM_CLASSES - 1)  # torch.unique, done in Python
    present = sorted(set(values))
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[torch.tensor(present, dtype=torch.long)] = 1.0 / torch.tensor([float(values.count(c)) for c in present])
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, idx)
    return F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid, chosen = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid, chosen) + class_loss(class_logits, classes, valid, chosen, flat_classes)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
