"""Red team 20 (session 56): filewriter_reads_06: chapter 06's lab with every host read kept, each made by writing the tensor's storage
into an in-memory zip with torch._C.PyTorchFileWriter.write_record (a C call that copies the storage's bytes with no
aten op and is not in host_syncs' list of reading calls), then decoding the bytes with int.from_bytes. The lab's
n_objects.max() read, its `if valid.any()` guard, its boolean selections (as index lists) and its torch.unique
(counted in Python) all stay data-dependent reads on the host, every step."""

import torch
from torch.nn import functional as F

from checker.lab import start

import io


def host_bytes(x):
    """The raw bytes of a CPU tensor's values, read without any op that reads a value."""
    y = x.reshape(-1).clone()
    storage = y.untyped_storage()
    buf = io.BytesIO()
    writer = torch._C.PyTorchFileWriter(buf)
    writer.write_record("d", storage, storage.nbytes())
    writer.write_end_of_file()
    data = buf.getvalue()
    name_len = int.from_bytes(data[26:28], "little")
    extra_len = int.from_bytes(data[28:30], "little")
    start = 30 + name_len + extra_len
    return data[start:start + storage.nbytes()]


def host_ints(x):
    raw = host_bytes(x.to(torch.int64))
    return [int.from_bytes(raw[i:i + 8], "little", signed=True) for i in range(0, len(raw), 8)]


# torch.cuda.set_sync_debug_mode("warn")   # on a GPU: warn, with the line, at every sync from here on

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
    counts = host_ints(n_objects)  # read on the host, every step
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


def mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks.

    TODO: this helper makes the host wait for the GPU. A mean over the selected slots is a weighted sum over
    all slots divided by the number selected.
    """
    flags = host_bytes(valid.flatten())  # read on the host, every step
    if not any(flags):
        return mask_logits.sum() * 0
    chosen = torch.tensor([i for i, f in enumerate(flags) if f], dtype=torch.long)
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[chosen]
    target = masks.flatten(0, 1)[chosen]
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count in the batch.

    TODO: this helper makes the host wait for the GPU. Counting per class needs no list of the classes present.
    """
    flags = host_bytes(valid.flatten())  # read on the host, every step
    chosen = torch.tensor([i for i, f in enumerate(flags) if f], dtype=torch.long)
    targets = classes.flatten()[chosen]
    seen = {}
    for c in host_ints(targets):  # the classes present and their counts, on the host
        seen[c] = seen.get(c, 0) + 1
    present = torch.tensor(sorted(seen), dtype=torch.long)
    counts = torch.tensor([seen[c] for c in sorted(seen)], dtype=torch.float32)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[present] = 1.0 / counts
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[chosen]
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
