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

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


# --8<-- [start:helpers]
def pad_targets(flat_masks, flat_classes, n_objects):
    """Scatter the packed targets into one slot per object: masks (B, N, S, S), classes (B, N), valid (B, N)."""
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


def mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks."""
    if not valid.any():
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[valid.flatten()]
    target = masks.flatten(0, 1)[valid.flatten()]
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count in the batch."""
    targets = classes.flatten()[valid.flatten()]
    present, counts = torch.unique(targets, return_counts=True)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[present] = 1.0 / counts.float()
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[valid.flatten()]
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
