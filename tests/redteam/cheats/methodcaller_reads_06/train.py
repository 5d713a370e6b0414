"""Chapter 06 lab: find the host syncs hidden in the loss helpers, and take them out.

The training loop reads nothing back to the host, yet the GPU keeps running dry. Three helpers below make the
CPU wait for the GPU, some of them more than once per call, in lines that do not look like reads. Find them with
the recipe (`workbook profile 06 --tool nsys` or `--tool torch`), or let PyTorch name them for you: uncomment
`torch.cuda.set_sync_debug_mode("warn")` below and run on a GPU; each sync then prints a warning with its line.
Remove them with static shapes, masked arithmetic instead of indexing, `output_size=`, and no data-dependent
guards in the step. The loss must stay the same function of the model's outputs: the checker compares your
trained weights with the slow script's.

    python labs/06_hidden_syncs/train.py --steps 200     # trains and prints samples/s
    workbook check 06                                     # measures your fix against the baseline

Only this file is yours to edit. The model and the data come from chapters/06_hidden_syncs/workload.py; it
guarantees at most `session.extras["max_objects"]` objects per image and at least one object per batch.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

# torch.cuda.set_sync_debug_mode("warn")   # on a GPU: warn, with the line, at every sync from here on

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


# --8<-- [start:helpers]
from operator import methodcaller

# the values are read back into Python exactly as before (a device-to-host copy and a sync on a GPU, every call),
# but through a C-level caller: the profiler's Python tracer sees no `tolist` call and no aten op reads a value
_host = methodcaller("tolist")


def _selected(valid):
    flags = _host(valid.flatten())                                   # hidden read
    return [i for i, f in enumerate(flags) if f]


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = _host(n_objects)                                        # hidden read (was .max().item())
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
    chosen = _selected(valid)
    if not chosen:
        return mask_logits.sum() * 0
    index = torch.tensor(chosen, device=valid.device)
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, index)
    target = masks.flatten(0, 1).index_select(0, index)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    index = torch.tensor(_selected(valid), device=valid.device)
    targets = classes.flatten().index_select(0, index)
    values = _host(targets)                                          # hidden read (was torch.unique)
    present = sorted(set(values))
    counts = [values.count(c) for c in present]
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[torch.tensor(present, device=weight.device)] = 1.0 / torch.tensor(counts, device=weight.device).float()
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
