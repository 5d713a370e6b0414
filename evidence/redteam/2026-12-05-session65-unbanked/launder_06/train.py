"""Chapter 06, red team 39: the helpers' host reads kept, every step, made by the grader's own code.

A CPU trace excuses a `tolist()` whose innermost caller (not torch's, not a library's) is the grader's data code
(checker/base, a workload.py) while the harness fetches a batch (its `data` range): that is how KeyedOrder draws a
batch's index. So the script hands session.steps() a wrapper of session.batches that, while the harness fetches,
gets each batch's `n_objects` and `flat_classes` read by a KeyedOrder of its own: `torch.randint` is made to return
the tensor for one call, KeyedOrder calls `.tolist()` on it, and the list comes back as the index it looks up in a
"batch list" that is the script's. The helpers then need no read of their own: the slow script's reads (the largest
count, the guard, the selected slots, the classes present and their counts) all happen on the host, every step.
"""

import torch
from torch.nn import functional as F

from checker.base.workloads import KeyedOrder
from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


class _Catch:
    """A one-item 'batch list': what KeyedOrder looks up in it is the value it read."""

    def __init__(self):
        self.value = None

    def __len__(self):
        return 1

    def __getitem__(self, index):
        self.value = index
        return None


def grader_reads(t):
    """t's values as a list, read by the grader's KeyedOrder (its `.tolist()`)."""
    catch = _Catch()
    order = KeyedOrder(catch)
    order.set_key(0)
    real = torch.randint
    torch.randint = lambda *args, **kwargs: t.reshape(1, -1)
    try:
        for _ in order:
            pass
    finally:
        torch.randint = real
    return catch.value


class ReadWhileFetched:
    """session.batches, each batch's values read as the harness fetches it."""

    def __init__(self, inner):
        self.inner, self.values = inner, {}

    def __iter__(self):
        for batch in self.inner:
            images, flat_masks, flat_classes, n_objects = batch
            self.values[id(n_objects)] = (grader_reads(n_objects), grader_reads(flat_classes))
            yield batch


source = ReadWhileFetched(session.batches)


def pad_targets(flat_masks, flat_classes, n_objects, counts):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    max_n = int(max(counts))                 # sized by a value read, as n_objects.max().item()
    image_of = torch.tensor([i for i, n in enumerate(counts) for _ in range(int(n))], dtype=torch.long)
    slot_of = torch.tensor([k for n in counts for k in range(int(n))], dtype=torch.long)
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    selected = torch.tensor([i * max_n + k for i, n in enumerate(counts) for k in range(int(n))], dtype=torch.long)
    return masks, classes, valid, selected


def mask_loss(mask_logits, masks, valid, selected, counts):
    if sum(counts) == 0:                     # the guard, on the values read
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[selected]
    target = masks.flatten(0, 1)[selected]
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid, selected, values):
    targets = classes.flatten()[selected]
    present_list = sorted(set(values))       # torch.unique's work, on the values read
    present = torch.tensor(present_list, dtype=torch.long)
    counts = torch.tensor([values.count(c) for c in present_list], dtype=torch.float32)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[present] = 1.0 / counts
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[selected]
    return F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(source):
    counts, values = source.values.pop(id(n_objects))
    mask_logits, class_logits = model(images)
    masks, classes, valid, selected = pad_targets(flat_masks, flat_classes, n_objects, counts)
    loss = mask_loss(mask_logits, masks, valid, selected, counts) + class_loss(class_logits, classes, valid, selected,
                                                                                values)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
