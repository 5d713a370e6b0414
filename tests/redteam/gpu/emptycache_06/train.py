"""CHEAT emptycache_06: the reference helpers, plus torch.cuda.empty_cache() in every step (in pad_targets, where a
helper "tidies up"). On a GPU that frees the caching allocator's idle blocks with cudaFree, which synchronizes the
device implicitly, and makes the next step cudaMalloc them again: a hidden sync every step, the chapter's subject.
GPU host_syncs counts only cuda*Synchronize and non-Async cudaMemcpy (RUNTIME_SYNCS), not cudaFree; on a CPU the call
is a no-op (CUDA never initialized), so no CPU check can see it.

Original: Chapter 06, reference solution: the loss helpers compute the same loss without asking the host for a value.

Every shape is known on the host before the step runs (max_objects slots per image; the packed tensors'
lengths), so nothing has to be read back: padding is to the static slot count, means over selected slots are
weighted sums over all slots, the per-class counts are a scatter-add into a fixed number of bins, and
`repeat_interleave` is told its output size. The data guarantees at least one object per batch, so the guard
is gone from the step; the weighted means still divide safely when a batch has none.

    python solutions/06_hidden_syncs/train.py --steps 200
"""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAX_OBJECTS = session.extras["max_objects"]  # the model predicts this many slots per image: a static shape


# --8<-- [start:helpers]
def pad_targets(flat_masks, flat_classes, n_objects):
    """Scatter the packed targets into one slot per object: masks (B, N, S, S), classes (B, N), valid (B, N)."""
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
    torch.cuda.empty_cache()  # "keep memory tidy": cudaFree on a GPU, an implicit device sync
    total = flat_classes.shape[0]  # the number of objects: a shape, known on the host, no sync
    # output_size: repeat_interleave need not add up the counts on the device to size its result (a sync)
    image_of = torch.repeat_interleave(torch.arange(batch, device=device), n_objects, output_size=total)
    first = torch.cumsum(n_objects, 0) - n_objects
    slot_of = torch.arange(total, device=device) - first[image_of]
    # pad to the static slot count instead of n_objects.max().item(): the size is known without a read
    masks = flat_masks.new_zeros(batch, MAX_OBJECTS, size, size)
    masks[image_of, slot_of] = flat_masks  # integer indices of known length: a queued scatter, no sync
    classes = flat_classes.new_zeros(batch, MAX_OBJECTS)
    classes[image_of, slot_of] = flat_classes
    valid = torch.arange(MAX_OBJECTS, device=device) < n_objects[:, None]
    return masks, classes, valid


def mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks."""
    # masked arithmetic instead of mask_logits[valid]: boolean indexing must count the selected elements on
    # the host to size its result (a sync, and another in backward); a weighted sum over every slot need not
    per_pixel = F.binary_cross_entropy_with_logits(mask_logits, masks, reduction="none")
    weight = valid[:, :, None, None].to(per_pixel.dtype)
    selected = weight.sum() * (per_pixel.shape[-2] * per_pixel.shape[-1])
    # no `if not valid.any()` guard (a read): with no object the sum is 0 and the divisor is clamped to 1
    return (per_pixel * weight).sum() / selected.clamp(min=1)


def class_loss(class_logits, classes, valid):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count in the batch."""
    num_classes = class_logits.shape[-1]
    selected = valid.to(class_logits.dtype)
    # counts per class by a scatter-add into num_classes bins: torch.unique would size its result on the host
    counts = torch.zeros(num_classes, device=class_logits.device).index_add_(0, classes.flatten(), selected.flatten())
    class_weight = torch.where(counts > 0, 1.0 / counts.clamp(min=1), torch.zeros_like(counts))
    slot_weight = class_weight[classes] * selected  # 0 for padding slots
    per_slot = F.cross_entropy(class_logits.flatten(0, 1), classes.flatten(), reduction="none").view_as(slot_weight)
    # what F.cross_entropy(..., weight=) computes: sum of weight * loss over the sum of the weights
    return (per_slot * slot_weight).sum() / slot_weight.sum().clamp(min=1e-12)
# --8<-- [end:helpers]


running_loss = torch.zeros((), device=session.device)
# --8<-- [start:loop]
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    mask_logits, class_logits = model(images)
    masks, classes, valid = pad_targets(flat_masks, flat_classes, n_objects)
    loss = mask_loss(mask_logits, masks, valid) + class_loss(class_logits, classes, valid)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()  # no sync: the sum stays on the device
    if session.is_log_step(step):  # one read per logging interval: allowed
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
# --8<-- [end:loop]

session.finish()
