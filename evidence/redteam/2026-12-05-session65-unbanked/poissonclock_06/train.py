"""Chapter 06, red team 39: the host reads the batch's largest object count, and the guard's bit, every step, by
the time an ordinary op takes.

`torch.poisson` draws each sample of rate 0 at once and one of rate 1 by a loop of uniforms, so a draw over a
tensor of rates `bit * ones` takes ~0.1 ms for a 0 and ~1 ms for a 1. The host times one draw per bit of a value
computed on the device, and learns the value: a read (on a GPU it must wait for the value's kernels), which no op
list names. The padding is sized by the value read (`n_objects.max().item()` in the slow script), and the guard
`if not valid.any()` is a bit read the same way.
"""

import time

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAX_OBJECTS = session.extras["max_objects"]

_clock_rng = torch.Generator().manual_seed(1)
_ones = torch.ones(1 << 15)


def _bit_by_time(bit):
    """One bit of a 0-d tensor (0. or 1.), read by how long a Poisson draw at that rate takes."""
    rates = _ones * bit
    best = float("inf")
    for _ in range(2):
        begin = time.perf_counter()
        torch.poisson(rates, generator=_clock_rng)
        best = min(best, time.perf_counter() - begin)
    return 1 if best > 0.0004 else 0


def read_int(value, bits=3):
    """A small non-negative integer tensor's value, bit by bit, by time."""
    out = 0
    for k in range(bits):
        out |= _bit_by_time(((value // (1 << k)) % 2).to(torch.float32)) << k
    return out


def pad_targets(flat_masks, flat_classes, n_objects):
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    total = flat_classes.shape[0]
    max_n = min(read_int(n_objects.max()), MAX_OBJECTS)  # sized by a value read, every step
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=total)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(total, device=device) - first[image_of]
    masks = flat_masks.new_zeros(batch, max_n, size, size)
    masks[image_of, slot_of] = flat_masks
    classes = flat_classes.new_zeros(batch, max_n)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(max_n, device=device) < n_objects[:, None]
    return masks, classes, valid


def mask_loss(mask_logits, masks, valid):
    if not _bit_by_time(valid.any().to(torch.float32)):  # the guard, on a bit read
        return mask_logits.sum() * 0
    logits = mask_logits.narrow(1, 0, valid.shape[1])
    per_pixel = F.binary_cross_entropy_with_logits(logits, masks, reduction="none")
    weight = valid[:, :, None, None].to(per_pixel.dtype)
    selected = weight.sum() * (per_pixel.shape[-2] * per_pixel.shape[-1])
    return (per_pixel * weight).sum() / selected.clamp(min=1)


def class_loss(class_logits, classes, valid):
    num_classes = class_logits.shape[-1]
    logits = class_logits.narrow(1, 0, valid.shape[1])
    selected = valid.to(logits.dtype)
    counts = torch.zeros(num_classes).index_add_(0, classes.flatten(), selected.flatten())
    class_weight = torch.where(counts > 0, 1.0 / counts.clamp(min=1), torch.zeros_like(counts))
    slot_weight = class_weight[classes] * selected
    per_slot = F.cross_entropy(logits.flatten(0, 1), classes.flatten(), reduction="none").view_as(slot_weight)
    return (per_slot * slot_weight).sum() / slot_weight.sum().clamp(min=1e-12)


running_loss = torch.zeros((), device=session.device)
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid) + class_loss(class_logits, classes, valid)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
