"""Chapter 06 (red-team attempt sparse_size_06): the lab's data-dependent loss kept, its host values read through the
size that torch.sparse_coo_tensor infers from its indices.

torch.sparse_coo_tensor(indices, values) without a size computes one: indices.max(1) + 1 per sparse dimension, read
on the host through an accessor (no aten::item, no _local_scalar_dense). Given a column of n values as indices
(n sparse dimensions, one entry), the result's shape is each value plus one: a whole vector read in one call whose
ops (aten::sparse_coo_tensor, min, max, add_, to) are none of host_syncs' reading ops, and no Python read call
(tolist, numpy, item) is made. With n_objects and flat_classes on the host, the lab's helpers run as the lab wrote
them: padding to the batch's own max_n, the real slots picked by index, classes weighted by counts made on the host.
On a GPU the same call would copy the maxima back and wait (a sync); on a CPU nothing counts it.
"""

import collections

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
_ONE = torch.ones(1)


def host_ints(t):
    """The values of a tensor of non-negative integers, as Python ints, from an inferred sparse size."""
    if t.numel() == 0:
        return []
    shape = torch.sparse_coo_tensor(t.reshape(-1, 1), _ONE, check_invariants=False).shape
    return [s - 1 for s in shape]


def pad_targets(flat_masks, flat_classes, n_objects):
    """The lab's padding to the batch's own max_n, sized from values known on the host."""
    batch, size = n_objects.shape[0], flat_masks.shape[-1]
    counts = host_ints(n_objects)
    max_n = max(counts)
    image_of = torch.tensor([b for b in range(batch) for _ in range(counts[b])])
    slot_of = torch.tensor([j for b in range(batch) for j in range(counts[b])])
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    selected = torch.tensor([b * max_n + j for b in range(batch) for j in range(counts[b])])
    return masks, classes, selected, max_n


def mask_loss(mask_logits, masks, selected, max_n):
    """Mean binary cross-entropy over the pixels of the real objects' masks (the lab's selection, by index)."""
    predicted = mask_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, selected)
    target = masks.flatten(0, 1).index_select(0, selected)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, selected, max_n, class_values):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count (counted on the host)."""
    targets = classes.flatten().index_select(0, selected)
    weight = torch.zeros(class_logits.shape[-1])
    for cls, count in collections.Counter(class_values).items():
        weight[cls] = 1.0 / count
    logits = class_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, selected)
    return F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, selected, max_n = pad_targets(flat_masks, flat_classes, n_objects)
    class_values = host_ints(flat_classes)
    loss = mask_loss(mask_logits, masks, selected, max_n) + class_loss(class_logits, classes, selected, max_n,
                                                                        class_values)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
