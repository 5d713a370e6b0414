"""Chapter 06 (red-team attempt csr_nnz_reads_06, red team 29): the lab's reads kept, each value read back as the
stored-entry count of a product of two CSR matrices. The lab's docstring follows.

Chapter 06 lab: find the host syncs hidden in the loss helpers, and take them out.

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
import warnings

warnings.filterwarnings("ignore")
SPAN = 64  # the counts read below are all smaller
_rows = torch.arange(SPAN).repeat_interleave(torch.arange(SPAN))
_cols = torch.cat([torch.arange(r) for r in range(SPAN)])
STAIRS = torch.sparse_coo_tensor(torch.stack([_rows, _cols]), torch.ones(len(_rows)), (SPAN, SPAN)).coalesce().to_sparse_csr()
ONE_ROW = torch.tensor([0, 1])


def count_of(t):
    """A small non-negative count as a Python int: row t of a staircase holds t entries."""
    picked = torch.sparse_csr_tensor(ONE_ROW, t.reshape(1).long(), torch.ones(1), (1, SPAN))
    return (picked @ STAIRS)._nnz()


def selected(flat, mask):
    """flat[mask] by a count and a sort."""
    k = count_of(mask.sum())
    order = torch.argsort((~mask).to(torch.int8), stable=True)[:k]
    return flat.index_select(0, order)


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    max_n = count_of(n_objects.max())
    total = flat_masks.shape[0]
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=total)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(image_of.shape[0], device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def mask_loss(mask_logits, masks, valid):
    if not count_of(valid.any()):
        return mask_logits.sum() * 0
    predicted = selected(mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1), valid.flatten())
    target = selected(masks.flatten(0, 1), valid.flatten())
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    targets = selected(classes.flatten(), valid.flatten())
    classes_n = class_logits.shape[-1]
    counts_all = torch.zeros(classes_n, dtype=torch.long, device=targets.device).index_add_(0, targets, torch.ones_like(targets))
    present = selected(torch.arange(classes_n, device=targets.device), counts_all > 0)
    counts = counts_all.index_select(0, present)
    weight = torch.zeros(classes_n, device=class_logits.device)
    weight[present] = 1.0 / counts.float()
    logits = selected(class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1), valid.flatten())
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
