"""Chapter 06 lab: find the host syncs hidden in the loss helpers, and take them out.

The training loop reads nothing back to the host, yet the GPU keeps running dry. Three helpers below make the
CPU wait for the GPU, some of them more than once per call, in lines that do not look like reads. Find them with
the recipe (`workbook profile 06 --tool nsys` or `--tool torch`), or let PyTorch name them for you: uncomment
`torch.cuda.set_sync_debug_mode("warn")` below and run on a GPU; each sync then prints a warning with its line.
Remove them with static shapes, masked arithmetic instead of indexing, `output_size=`, and no data-dependent
guards in the step. The loss must stay the same function of the model's outputs: the checker compares your
trained weights with the slow script's.

    python labs/06_hidden_syncs/train.py --steps 200     # trains and prints samples/s
    workbook check 06                                     # measures your fix against the baseline

Only this file is yours to edit. The model and the data come from chapters/06_hidden_syncs/workload.py; it
guarantees at most `session.extras["max_objects"]` objects per image and at least one object per batch.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

# torch.cuda.set_sync_debug_mode("warn")   # on a GPU: warn, with the line, at every sync from here on

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


# --8<-- [start:helpers]
def pad_targets(flat_masks, flat_classes, n_objects):
    """As the lab: padded to the batch's largest object count, a size read from the device (a sync on a GPU)."""
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    max_n = torch.bincount(n_objects).numel() - 1  # n_objects.max(), read through bincount's data-dependent shape
    total = torch.bincount(torch.cumsum(n_objects, 0)).numel() - 1  # n_objects.sum(), the same way
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=total)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(image_of.shape[0], device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def selected(valid):
    """The positions of the True entries (what x[mask] selects), their count read through bincount's shape."""
    flat = valid.flatten()
    k = torch.bincount(flat.long().cumsum(0)).numel() - 1
    return torch.argsort((~flat).to(torch.int8), stable=True)[:k]


def mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks (the guard kept: a read of the device)."""
    if not torch.equal(valid.any(), torch.ones((), dtype=torch.bool, device=valid.device)):
        return mask_logits.sum() * 0
    idx = selected(valid)
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, idx)
    target = masks.flatten(0, 1).index_select(0, idx)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count in the batch."""
    idx = selected(valid)
    targets = classes.flatten().index_select(0, idx)
    counts = torch.bincount(targets)  # as many bins as the largest class present: a data-dependent shape
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[:counts.numel()] = torch.where(counts > 0, 1.0 / counts.clamp(min=1).float(), torch.zeros_like(weight[:counts.numel()]))
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, idx)
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

    running_loss += loss.detach()  # no sync: the sum stays on the device
    if session.is_log_step(step):  # one read per logging interval: allowed
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
# --8<-- [end:loop]

session.finish()
