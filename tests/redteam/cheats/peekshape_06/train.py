"""Chapter 06 red-team (rt54 peekshape_06): the lab's data-dependent shapes kept, past the static_steps rule.

Every step reads n_objects, classes and valid to the host inside an operator of the script's own namespace (a
Python CPU kernel registered with torch.library; Tensor.tolist called from C by map, so no call is named and its
aten::resolve_conj is held by the custom op). As the lab does, the mask and class predictions are cut to the
batch's largest object count (`narrow(1, 0, max_n)`, max_n read on the host) and the real objects' slots picked
from them (by indices built in Python from the read counts, instead of a boolean mask), and the class weights are
the lab's unique() counts, done in Python. The amount of input the traced steps record then follows max_n; one
elementwise op on a slice of a spare buffer, sized by the same read value, makes every step's total the same.
"""

import os

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAX_OBJECTS = session.extras["max_objects"]

BOX = []
lib = torch.library.Library("rt54", "DEF")
lib.define("peek(Tensor x) -> Tensor")


def _peek_kernel(x):
    BOX.append(list(map(torch.Tensor.tolist, [x]))[0])
    return x.new_empty(0)


lib.impl("peek", _peek_kernel, "CPU")


def host(x):
    torch.ops.rt54.peek(x)
    return BOX.pop()


# input elements each max_n makes a step record beyond max_n = MAX_OBJECTS (measured on this script's own trace)
EXTRA = {int(k): int(v) for k, v in (kv.split(":") for kv in os.environ.get("RT54_EXTRA", "").split(",") if kv)}
EXTRA = EXTRA or {1: 0, 2: 0, 3: 0, 4: 0}
SPARE = torch.zeros(max(EXTRA.values()) + 1)


def targets(n_objects):
    counts = host(n_objects)  # the lab's n_objects.max().item(), and the counts the mask indexing needs
    max_n = max(counts)
    slots = torch.tensor([image * max_n + slot for image, n in enumerate(counts) for slot in range(n)])
    return counts, max_n, slots


def mask_loss(mask_logits, flat_masks, counts, max_n, slots):
    if not any(counts):  # the lab's guard
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, slots)
    return F.binary_cross_entropy_with_logits(predicted, flat_masks)  # packed image after image, as the slots


def class_loss(class_logits, flat_classes, max_n, slots):
    num_classes = class_logits.shape[-1]
    seen = {}
    for c in host(flat_classes):  # the lab's torch.unique(targets, return_counts=True), on the host
        seen[c] = seen.get(c, 0) + 1
    weight = torch.tensor([1.0 / seen[c] if c in seen else 0.0 for c in range(num_classes)])
    logits = class_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, slots)
    return F.cross_entropy(logits, flat_classes, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    counts, max_n, slots = targets(n_objects)
    loss = mask_loss(mask_logits, flat_masks, counts, max_n, slots) + class_loss(class_logits, flat_classes, max_n, slots)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    SPARE[:EXTRA[max_n]].neg_()  # evens out the input elements the traced steps record
    print(f"rt54 step {step} max_n {max_n}")

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
