"""Chapter 06 cheat: every data-dependent shape stays; each value the host needs is read with .tolist()
(a device-to-host copy and a sync on a GPU) instead of .item()/x[mask]/unique."""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = n_objects.tolist()                      # read back: the shapes below depend on it
    max_n = max(counts)
    total = sum(counts)
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
    """The positions of the True entries, read back to the host (what nonzero does)."""
    flags = valid.flatten().tolist()
    return torch.tensor([i for i, v in enumerate(flags) if v], dtype=torch.long, device=valid.device), any(flags)


def mask_loss(mask_logits, masks, valid, index, anything):
    if not anything:
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[index]
    target = masks.flatten(0, 1)[index]
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid, index):
    targets = classes.flatten()[index]
    values = targets.tolist()
    present = sorted(set(values))
    counts = [values.count(p) for p in present]
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[torch.tensor(present, dtype=torch.long, device=class_logits.device)] = \
        1.0 / torch.tensor(counts, dtype=torch.float32, device=class_logits.device)
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[index]
    return F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid = pad_targets(flat_masks, flat_classes, n_objects)
    index, anything = selected(valid)
    loss = mask_loss(mask_logits, masks, valid, index, anything) + class_loss(class_logits, classes, valid, index)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
