"""Red team 11 (chapter 06): every read of the slow script kept, made by copy_ into a tensor over a bytearray
(torch.frombuffer) and read back by indexing a memoryview of it: no op or named call a CPU trace records."""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# a host mirror: a tensor whose memory is a Python bytearray
_host = bytearray(8 * 8192)
_mirror = torch.frombuffer(_host, dtype=torch.int64)
_view = memoryview(_host).cast("q")


def host_ints(t):
    n = t.numel()
    _mirror[:n].copy_(t.reshape(-1))
    return [_view[i] for i in range(n)]


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = host_ints(n_objects)
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
    picked = [b * max_n + k for b in range(batch) for k in range(counts[b])]
    index = torch.tensor(picked, dtype=torch.long, device=device)
    return masks, classes, valid, index


def mask_loss(mask_logits, masks, valid, index):
    if index.shape[0] == 0:
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, index)
    target = masks.flatten(0, 1).index_select(0, index)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid, index):
    targets = classes.flatten().index_select(0, index)
    values = host_ints(targets)
    tally = {}
    for v in values:
        tally[v] = tally.get(v, 0) + 1
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    present = sorted(tally)
    weight[torch.tensor(present, dtype=torch.long)] = 1.0 / torch.tensor([tally[c] for c in present]).float()
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, index)
    return F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid, index = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid, index) + class_loss(class_logits, classes, valid, index)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
