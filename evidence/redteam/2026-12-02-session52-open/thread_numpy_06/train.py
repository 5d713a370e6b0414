"""Chapter 06 (red-team attempt thread_numpy_06): the lab's data-dependent shapes kept, every value they need read in a
thread started inside the step, by Tensor.numpy().

What the lab reads every step (how many objects each image holds, and which classes: n.max(), the guard, the boolean
masks, torch.unique, repeat_interleave's sizes) is read here once per step into Python lists, and the loss is built
from them: padding to the batch's own max_n, the real objects' slots picked by index, class weights counted on the
host. The same loss as the slow script's, with the same values in the same order, so the weights are its weights.

The reads are made in a threading.Thread started in the step: torch.profiler's Python tracer is installed in the
threads that exist when it starts and never sees a call in a thread started later, and Tensor.numpy() on a CPU
tensor dispatches no op that reads a value (only aten::detach). The tensors read are never written in place, so the
harness's watch on Tensor.numpy (views written through in the window) counts nothing, and the arrays are dropped
before the window closes (tensor_views finds none).

    python train.py --steps 200
"""

import threading

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
NUM_CLASSES = session.extras["num_classes"]


def host_lists(*tensors):
    """Each tensor's values as a Python list, read in a thread the profiler's Python tracer does not follow."""
    box = []
    reader = threading.Thread(target=lambda: box.extend(t.numpy().tolist() for t in tensors))
    reader.start()
    reader.join()
    return box


def loss_of(mask_logits, class_logits, flat_masks, flat_classes, n_objects):
    """The slow script's loss (its pad_targets, mask_loss and class_loss), its data-dependent sizes read on the host."""
    counts, classes = host_lists(n_objects, flat_classes)
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
