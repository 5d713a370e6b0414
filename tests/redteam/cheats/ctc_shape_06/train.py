"""Red team 35: chapter 06's reads kept, each value read as the shape of an op no list names (CTC's alpha table)."""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

_LOG_PROBS = torch.zeros(12, 1, 2).log_softmax(-1)  # one sequence of 12 frames, 2 symbols
_TARGETS = torch.ones(1, 10, dtype=torch.long)
_INPUT_LENGTHS = torch.tensor([12])


def values(t):
    """Each value of a small non-negative integer tensor, handed to Python as the size of CTC's alpha table
    (2 * max target length + 1): the kernel reads the lengths itself, and the trace shows one aten::_ctc_loss."""
    out = []
    for i in range(t.shape[0]):
        alpha = torch._ctc_loss(_LOG_PROBS, _TARGETS, _INPUT_LENGTHS, t[i:i + 1])[1]
        out.append((alpha.shape[2] - 1) // 2)
    return out


def prepare(n_objects, flat_classes):
    n_list = values(n_objects)          # the slow script's n_objects.max().item(), repeat_interleave, x[mask]
    cls_list = values(flat_classes)     # the slow script's torch.unique
    max_n = max(n_list)
    img, slot = [], []
    for i, n in enumerate(n_list):
        img += [i] * n
        slot += list(range(n))
    flat_pos = [i * max_n + s for i, s in zip(img, slot)]
    present = sorted(set(cls_list))
    counts = [cls_list.count(c) for c in present]
    return max_n, img, slot, flat_pos, present, counts


def losses(mask_logits, class_logits, flat_masks, flat_classes, info):
    max_n, img, slot, flat_pos, present, counts = info
    batch, size = mask_logits.shape[0], flat_masks.shape[-1]
    image_of, slot_of = torch.tensor(img, dtype=torch.long), torch.tensor(slot, dtype=torch.long)
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    pos = torch.tensor(flat_pos, dtype=torch.long)
    if not flat_pos:
        mloss = mask_logits.sum() * 0
    else:
        predicted = mask_logits.narrow(1, 0, max_n).flatten(0, 1)[pos]
        target = masks.flatten(0, 1)[pos]
        mloss = F.binary_cross_entropy_with_logits(predicted, target)
    targets = classes.flatten()[pos]
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[torch.tensor(present, dtype=torch.long)] = 1.0 / torch.tensor(counts, dtype=torch.long).float()
    logits = class_logits.narrow(1, 0, max_n).flatten(0, 1)[pos]
    return mloss + F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    info = prepare(n_objects, flat_classes)
    mask_logits, class_logits = model(images)
    loss = losses(mask_logits, class_logits, flat_masks, flat_classes, info)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
