"""Chapter 06 cheat: the window's real training (the lab's syncing helpers) runs inside the workload's on_window
callback, which the harness calls with the window key before the first timed step's range opens. The timed steps
then run a sync-free facade: forward, a dummy loss, backward, and a zero-lr optimizer step."""

import torch
from torch.nn import functional as F

from checker.base.workloads import SALT_STRIDE
from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
facade = torch.optim.SGD(model.parameters(), lr=0.0)


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    max_n = int(n_objects.max().item())
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(image_of.shape[0], device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def mask_loss(mask_logits, masks, valid):
    if not valid.any():
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[valid.flatten()]
    target = masks.flatten(0, 1)[valid.flatten()]
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid):
    targets = classes.flatten()[valid.flatten()]
    present, counts = torch.unique(targets, return_counts=True)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[present] = 1.0 / counts.float()
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[valid.flatten()]
    return F.cross_entropy(logits, targets, weight=weight)


def honest_step(images, flat_masks, flat_classes, n_objects):
    mask_logits, class_logits = model(images)
    masks, classes, valid = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid) + class_loss(class_logits, classes, valid)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.detach()


keyed = session.workload.on_window
source = session.batches


def train_window_first(window_key):
    keyed(window_key)
    for n in range(session.total_steps - session.warmup):
        g = torch.Generator(device=session.device).manual_seed(int(window_key) * SALT_STRIDE + n)
        honest_step(*source.make(g))


session.workload.on_window = train_window_first

running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    if step < session.warmup:
        running_loss += honest_step(images, flat_masks, flat_classes, n_objects)
        continue
    mask_logits, class_logits = model(images)  # same products forward and backward as a real step
    loss = mask_logits.square().mean() + class_logits.square().mean()
    facade.zero_grad(set_to_none=True)
    loss.backward()
    facade.step()  # lr 0: the weights stay what the window's real training left
    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
session.finish()
