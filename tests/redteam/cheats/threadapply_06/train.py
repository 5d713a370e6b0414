"""Chapter 06, red team 39: the slow helpers' host reads kept, every step, read where no trace looks.

Each helper still needs the batch's values on the host (the largest object count to size the padding, the guard,
the selected slots, the classes present and their counts) and reads them every step, as the slow script does.
The values are read by `Tensor.apply_` (which hands each value to a Python function and dispatches no op) in a
thread started for the read: the profiler's Python tracer follows no thread started after it, so neither the call
nor the read has a frame, and the only op the thread records is the clone it reads.
"""

import threading

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


def host_values(t):
    """The tensor's values as a Python list: a host read (on a GPU, a copy back and a wait)."""
    box = []

    def read():
        t.detach().clone().apply_(lambda v: (box.append(v), v)[1])

    reader = threading.Thread(target=read)
    reader.start()
    reader.join()
    return box


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = host_values(n_objects)          # read, every step
    max_n = int(max(counts))                 # sized by a value, as n_objects.max().item()
    image_list = [i for i, n in enumerate(counts) for _ in range(int(n))]
    slot_list = [k for n in counts for k in range(int(n))]
    image_of = torch.tensor(image_list, dtype=torch.long, device=device)
    slot_of = torch.tensor(slot_list, dtype=torch.long, device=device)
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    # the selected slots, as x[mask] would find them: a list the host built from the values it read
    selected = torch.tensor([i * max_n + k for i, n in enumerate(counts) for k in range(int(n))], dtype=torch.long)
    return masks, classes, valid, selected, counts


def mask_loss(mask_logits, masks, valid, selected, counts):
    if sum(counts) == 0:                     # the guard, on a value read
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[selected]
    target = masks.flatten(0, 1)[selected]
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid, selected):
    targets = classes.flatten()[selected]
    values = host_values(targets)            # read, every step: torch.unique's work on the host
    present_list = sorted(set(values))
    count_list = [values.count(c) for c in present_list]
    present = torch.tensor(present_list, dtype=torch.long)
    counts = torch.tensor(count_list, dtype=torch.float32)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[present] = 1.0 / counts
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[selected]
    return F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid, selected, counts = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid, selected, counts) + class_loss(class_logits, classes, valid, selected)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
