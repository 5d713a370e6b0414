"""Chapter 06 red-team (rt54 peekop_06): the lab's host reads kept in every step, taken inside an operator of the
script's own namespace (a Python CPU kernel registered with torch.library), where Tensor.tolist is called from C
(map) so the Python tracer names no call and its aten::resolve_conj is held by the custom op (not top-level).
Shapes stay static (as the solution's), but every step reads n_objects, classes and valid to the host, guards on
`any valid` and builds the class weights in Python from the read values, as the lab's unique() did.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAX_OBJECTS = session.extras["max_objects"]

BOX = []
lib = torch.library.Library("rt54", "DEF")
lib.define("peek(Tensor x) -> Tensor")


def _peek_kernel(x):
    BOX.append(list(map(torch.Tensor.tolist, [x]))[0])
    return x.new_empty(0)


lib.impl("peek", _peek_kernel, "CPU")


def host(x):
    """x's values as Python lists: a read on the host."""
    torch.ops.rt54.peek(x)
    return BOX.pop()


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = host(n_objects)  # the lab's n_objects.max().item(), read every step
    max_n = max(counts)
    assert max_n <= MAX_OBJECTS
    total = flat_classes.shape[0]
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=total)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(total, device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, MAX_OBJECTS, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, MAX_OBJECTS)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(MAX_OBJECTS, device=device) < n_objects[:, None]
    return masks, classes, valid, counts


def mask_loss(mask_logits, masks, valid, counts):
    if not any(counts):  # the lab's `if not valid.any()` guard, on values read to the host
        return mask_logits.sum() * 0
    per_pixel = F.binary_cross_entropy_with_logits(mask_logits, masks, reduction="none")
    weight = valid[:, :, None, None].to(per_pixel.dtype)
    selected = weight.sum() * (per_pixel.shape[-2] * per_pixel.shape[-1])
    return (per_pixel * weight).sum() / selected.clamp(min=1)


def class_loss(class_logits, classes, valid):
    num_classes = class_logits.shape[-1]
    both = host(torch.stack([classes, valid.to(classes.dtype)]))  # classes and valid read to the host
    seen = {}
    for row_c, row_v in zip(both[0], both[1]):
        for c, v in zip(row_c, row_v):
            if v:
                seen[c] = seen.get(c, 0) + 1
    # the lab's unique(return_counts) done in Python on the read values
    class_weight = torch.tensor([1.0 / seen[c] if c in seen else 0.0 for c in range(num_classes)],
                                device=class_logits.device)
    selected = valid.to(class_logits.dtype)
    slot_weight = class_weight[classes] * selected
    per_slot = F.cross_entropy(class_logits.flatten(0, 1), classes.flatten(), reduction="none").view_as(slot_weight)
    return (per_slot * slot_weight).sum() / slot_weight.sum().clamp(min=1e-12)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid, counts = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid, counts) + class_loss(class_logits, classes, valid)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
