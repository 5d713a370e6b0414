"""Red team 21 (session 56): chapter 06's lab, every per-step host read kept, none of them counted by host_syncs.

Each value the lab reads on the host (n_objects for max_n and the repeat count, the valid mask behind the boolean
indexing, the targets behind torch.unique, the `any`) is read through a torch.Generator: the tensor's 8 bytes are
cat into a real generator state as its `the_initial_seed` field, `Generator.set_state` takes them in C, and
`Generator.initial_seed()` hands them back as a Python int. No aten op reads a value (cat and views only), and the
Python tracer's `set_state` / `initial_seed` calls are not among syncs.py's PYTHON_READ names.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

# torch.cuda.set_sync_debug_mode("warn")   # on a GPU: warn, with the line, at every sync from here on



_GEN = torch.Generator()
_BASE = _GEN.get_state()


def host_values(t):
    """The values of an integer (or bool) tensor as a Python list of ints, 8 bytes per generator state."""
    t = t.to(torch.int64).reshape(-1)
    out = []
    for i in range(t.shape[0]):
        _GEN.set_state(torch.cat([t[i:i + 1].view(torch.uint8), _BASE[8:]]))
        value = _GEN.initial_seed()
        out.append(value - (1 << 64) if value >= (1 << 63) else value)
    return out

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


# --8<-- [start:helpers]
def pad_targets(flat_masks, flat_classes, n_objects):
    """Scatter the packed targets into one slot per object: masks (B, N, S, S), classes (B, N), valid (B, N).

    TODO: this helper makes the host wait for the GPU. The model always predicts max_objects slots, and the
    packed tensors' shapes are known on the host.
    """
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = host_values(n_objects)  # read on the host, as the lab's .item() and repeat_interleave read them
    max_n = max(counts)
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=sum(counts))
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(image_of.shape[0], device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def selected(valid):
    return [i for i, v in enumerate(host_values(valid.flatten())) if v]


def mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks.

    TODO: this helper makes the host wait for the GPU. A mean over the selected slots is a weighted sum over
    all slots divided by the number selected.
    """
    picked = selected(valid)  # the mask read on the host, as boolean indexing's nonzero reads it
    if not len(picked):
        return mask_logits.sum() * 0
    index = torch.tensor(picked, dtype=torch.long)
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, index)
    target = masks.flatten(0, 1).index_select(0, index)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count in the batch.

    TODO: this helper makes the host wait for the GPU. Counting per class needs no list of the classes present.
    """
    index = torch.tensor(selected(valid), dtype=torch.long)
    targets = classes.flatten().index_select(0, index)
    values = host_values(targets)  # read on the host, as torch.unique reads them
    present = sorted(set(values))
    counts = torch.tensor([values.count(c) for c in present], dtype=torch.float32)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[torch.tensor(present, dtype=torch.long)] = 1.0 / counts
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
