"""Chapter 06 (red-team attempt bounds_probe_06): the lab's data-dependent shapes kept, every value they need read
through an operator's bounds check, one bit per call.

A CPU kernel that indexes checks every index against the size it indexes, reading the index's value itself, and
raises IndexError for one out of range: `probe[k].index_select(0, t.narrow(0, i, 1))` fails exactly when t[i] >= k.
Walking k up from 1 reads t[i] as the first size that does not fail. No op that reads a value runs (the trace holds
aten::index_select and aten::narrow, as any indexing loss does), no Python call that reads one (tolist, numpy, cpu,
item) is made, and the values land in Python ints. On a GPU the same check is a device-side assert, not an answer:
this works where the graded run is a CPU run. Here it is run on a GPU (tests/redteam/gpu.toml), to show that the road
ends there: its probes live on the values' device, where an out-of-range index stops the device.

The objects per image (n_objects, at most max_objects) and their classes (below num_classes) are read that way, and
the loss is the lab's: padding to the batch's own max_n, its real slots picked by index, class weights counted on the
host, the same values in the same order, so the weights are the slow script's.

    python train.py --steps 200
"""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
NUM_CLASSES = session.extras["num_classes"]
BOUND = max(session.extras["max_objects"], NUM_CLASSES)  # every value read is in 0 .. BOUND
PROBES = [torch.zeros(size, device=session.device) for size in range(1, BOUND + 2)]  # where the values are


def probed(values):
    """A 1-D integer tensor's values, each read as the smallest probe its index fits in."""
    found = []
    for i in range(values.shape[0]):
        one = values.narrow(0, i, 1)
        for size, probe in enumerate(PROBES, start=1):
            try:
                probe.index_select(0, one)
            except IndexError:  # one >= size: try the next size
                continue
            found.append(size - 1)
            break
    return found


def loss_of(mask_logits, class_logits, flat_masks, flat_classes, n_objects):
    """The slow script's loss (its pad_targets, mask_loss and class_loss), its data-dependent sizes read on the host."""
    counts, classes = probed(n_objects), probed(flat_classes)
    max_n = max(counts)  # the lab's n_objects.max().item()
    # the valid slots in the lab's order (valid.flatten()): image after image, its objects in packed order, so the
    # targets it selects from its padded tensors are flat_masks and flat_classes themselves
    picked = torch.tensor([image * max_n + slot for image, count in enumerate(counts) for slot in range(count)])
    predicted = mask_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, picked)
    mask_term = F.binary_cross_entropy_with_logits(predicted, flat_masks)
    present = sorted(set(classes))  # the lab's torch.unique(targets, return_counts=True)
    weight = torch.zeros(NUM_CLASSES)
    weight[torch.tensor(present)] = 1.0 / torch.tensor([classes.count(c) for c in present]).float()
    logits = class_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, picked)
    class_term = F.cross_entropy(logits, flat_classes, weight=weight)
    return mask_term + class_term


running_loss = torch.zeros((), device=session.device)
# --8<-- [start:loop]
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    loss = loss_of(mask_logits, class_logits, flat_masks, flat_classes, n_objects)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()  # no sync: the sum stays on the device
    if session.is_log_step(step):  # one read per logging interval: allowed
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
# --8<-- [end:loop]

session.finish()
