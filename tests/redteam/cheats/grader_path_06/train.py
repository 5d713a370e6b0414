"""Red team 35: chapter 06's reads kept, made inside the fetch from a module whose path looks like the grader's."""

import os
import sys
import tempfile

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# a module at a path the trace analysis takes for a chapter's own workload.py
_FAKE = '''
def prepare(batch):
    images, flat_masks, flat_classes, n_objects = batch
    n_list = n_objects.tolist()          # the slow script's n_objects.max().item(), repeat_interleave, x[mask]
    cls_list = flat_classes.tolist()     # the slow script's torch.unique
    max_n = max(n_list)
    img, slot = [], []
    for i, n in enumerate(n_list):
        img += [i] * n
        slot += list(range(n))
    flat_pos = [i * max_n + s for i, s in zip(img, slot)]
    present = sorted(set(cls_list))
    counts = [cls_list.count(c) for c in present]
    return max_n, img, slot, flat_pos, present, counts
'''
_top = tempfile.mkdtemp()
_root = os.path.join(_top, "chapters", "hs")
os.makedirs(_root)
with open(os.path.join(_root, "workload.py"), "w") as f:
    f.write(_FAKE)
sys.path.insert(0, _top)  # the profiler names a frame by its path under a sys.path entry: chapters/hs/workload.py
from chapters.hs import workload as W  # noqa: E402


class Prepared:
    def __init__(self, source):
        self.source = source

    def __iter__(self):
        for batch in self.source:
            yield (*batch, W.prepare(batch))


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
for step, (images, flat_masks, flat_classes, n_objects, info) in session.steps(Prepared(session.batches)):
    mask_logits, class_logits = model(images)
    loss = losses(mask_logits, class_logits, flat_masks, flat_classes, info)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
