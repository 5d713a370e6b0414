"""Chapter 06 (red-team attempt packed_shape_06): sparse_size_06's loss, its host values read through the padded
shape torch.nn.utils.rnn.pad_packed_sequence gives a PackedSequence built by hand.

pad_packed_sequence runs aten::_pad_packed_sequence, whose CPU kernel reads its batch_sizes (a CPU int64 tensor)
through an accessor and sizes its output (max_len, batch_sizes[0], ...): a PackedSequence whose batch_sizes is
one value v + 1 gives a padded output of shape (1, v + 1, 1). host_syncs lists the packing op
(aten::_pack_padded_sequence, pack_reads_06) but not the unpacking one, so each value reaches Python as a shape, with
no counted op and no Python read call. One call per value (8 counts and 16 classes per step here).
"""

import collections

import torch
from torch.nn import functional as F
from torch.nn.utils.rnn import PackedSequence, pad_packed_sequence

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
_ROWS = torch.zeros(64, 1)  # more rows than any value + 1


def host_ints(t):
    """The values of a tensor of non-negative integers, as Python ints, one padded shape each."""
    values = []
    for i in range(t.numel()):
        sizes = t.reshape(-1).narrow(0, i, 1) + 1  # a one-step batch_sizes: v + 1 sequences at time 0
        padded, _lengths = pad_packed_sequence(PackedSequence(_ROWS, sizes))
        values.append(padded.shape[1] - 1)
    return values


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
