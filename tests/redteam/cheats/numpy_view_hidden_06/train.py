"""Cheat (reads through shared memory, red team 15): the lab's data-dependent reads done on host values read every
step through numpy views made before the window and hidden in a numpy object array."""
import numpy as np
import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
cfg = session.cfg
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
B, MAX = int(cfg["batch_size"]), int(session.extras["max_objects"])
OBJECTS = max(1, min(int(cfg.get("objects", B * MAX // 2)), B * MAX))

# host mirrors of the batch's counts and classes, and numpy views of them made before the window (untraced); the
# views live inside a numpy object array, whose elements the collector does not list
mirror_n = torch.zeros(B, dtype=torch.long)
mirror_c = torch.zeros(OBJECTS, dtype=torch.long)
holder = np.empty(2, dtype=object)
holder[0], holder[1] = mirror_n.numpy(), mirror_c.numpy()


def losses(mask_logits, class_logits, flat_masks, flat_classes, n_objects):
    mirror_n.copy_(n_objects)
    mirror_c.copy_(flat_classes)
    n = holder[0].tolist()  # the per-step reads the lab makes, now through numpy: max, repeat, unique, nonzero
    targets_list = holder[1].tolist()
    max_n = max(n)
    size = flat_masks.shape[-1]
    image_of = torch.tensor([b for b, c in enumerate(n) for _ in range(c)])
    slot_of = torch.tensor([j for c in n for j in range(c)])
    masks = flat_masks.new_zeros(B, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(B, max_n)
    classes[image_of, slot_of] = flat_classes
    picked = torch.tensor([b * max_n + j for b, c in enumerate(n) for j in range(c)])
    predicted = mask_logits.narrow(1, 0, max_n).flatten(0, 1)[picked]
    mask_term = F.binary_cross_entropy_with_logits(predicted, masks.flatten(0, 1)[picked])
    targets = classes.flatten()[picked]
    present = sorted(set(targets_list))
    counts = [targets_list.count(c) for c in present]
    weight = torch.zeros(class_logits.shape[-1])
    weight[torch.tensor(present)] = 1.0 / torch.tensor(counts, dtype=torch.float)
    logits = class_logits.narrow(1, 0, max_n).flatten(0, 1)[picked]
    return mask_term + F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    loss = losses(mask_logits, class_logits, flat_masks, flat_classes, n_objects)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
session.finish()
