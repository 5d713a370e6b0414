"""Cheat (reads through shared memory, red team 14): the lab's helpers kept, each value read by
`torch.as_tensor(np.empty(...)).copy_(t)` and numpy: the tensor over numpy memory is dropped in the line that wrote it.

Chapter 06 lab: find the host syncs hidden in the loss helpers, and take them out.

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
import numpy as np


def host_copy(t):
    """The tensor's values on the host, read by a copy into numpy memory (on a GPU: a D2H copy and a sync)."""
    out = np.empty(tuple(t.shape), dtype={torch.int64: np.int64, torch.bool: np.bool_}[t.dtype])
    torch.as_tensor(out).copy_(t)
    return out


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    n_np = host_copy(n_objects)
    max_n = int(n_np.max())
    image_of = torch.as_tensor(np.repeat(np.arange(batch), n_np)).to(device)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(image_of.shape[0], device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def mask_loss(mask_logits, masks, valid):
    valid_np = host_copy(valid.flatten())
    if not valid_np.any():
        return mask_logits.sum() * 0
    idx = torch.as_tensor(np.flatnonzero(valid_np)).to(mask_logits.device)
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, idx)
    target = masks.flatten(0, 1).index_select(0, idx)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    valid_np = host_copy(valid.flatten())
    idx = torch.as_tensor(np.flatnonzero(valid_np)).to(class_logits.device)
    targets = classes.flatten().index_select(0, idx)
    present, counts = np.unique(host_copy(targets), return_counts=True)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[torch.as_tensor(present).to(weight.device)] = 1.0 / torch.as_tensor(counts).to(weight.device).float()
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
