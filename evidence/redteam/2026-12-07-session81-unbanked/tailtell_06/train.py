"""CHEAT tailtell_06 (a GPU hypothesis; on a CPU it runs the reference helpers in every step and passes as the
solution does): on a GPU, chapter 06's first timed pair is traced only over a tail of trace_steps steps after its
window (traced_tail), and host_syncs reads that tail. The script is told --steps nominal+tail, and the nominal count is
public (chapter.toml, read here through checker.base.chapters), so a step number >= the nominal count is a traced tail
step, and a run told exactly the nominal count is an untraced timed run. This script runs the lab's syncing helpers
(the chapter's pattern) in every step no trace records, and the reference helpers where one does: the same loss, so the
same weights. Whether the window then still reaches the 1.25x speed bar is for a GPU to measure; the point is that the
sync count is read only where the script chose to behave.
"""


import torch
from torch.nn import functional as F

from checker.base.chapters import get_chapter
from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
NOMINAL = int(get_chapter("06_hidden_syncs").config(session.device.type)["steps"])  # public: chapter.toml
MAX_OBJECTS = session.extras["max_objects"]  # the model predicts this many slots per image: a static shape


# --8<-- [start:helpers]
def pad_targets(flat_masks, flat_classes, n_objects):
    """Scatter the packed targets into one slot per object: masks (B, N, S, S), classes (B, N), valid (B, N)."""
    batch, size, device = n_objects.shape[0], flat_masks.shape[-1], n_objects.device
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

# --8<-- [start:helpers]
def lab_pad_targets(flat_masks, flat_classes, n_objects):
    """Scatter the packed targets into one slot per object: masks (B, N, S, S), classes (B, N), valid (B, N).

    TODO: this helper makes the host wait for the GPU. The model always predicts max_objects slots, and the
    packed tensors' shapes are known on the host.
    """
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


def lab_mask_loss(mask_logits, masks, valid):
    """Mean binary cross-entropy over the pixels of the real objects' masks.

    TODO: this helper makes the host wait for the GPU. A mean over the selected slots is a weighted sum over
    all slots divided by the number selected.
    """
    if not valid.any():
        return mask_logits.sum() * 0
    predicted = mask_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[valid.flatten()]
    target = masks.flatten(0, 1)[valid.flatten()]
    return F.binary_cross_entropy_with_logits(predicted, target)


def lab_class_loss(class_logits, classes, valid):
    """Cross-entropy of the real objects' classes, each class weighted by 1 / its count in the batch.

    TODO: this helper makes the host wait for the GPU. Counting per class needs no list of the classes present.
    """
    targets = classes.flatten()[valid.flatten()]
    present, counts = torch.unique(targets, return_counts=True)
    weight = torch.zeros(class_logits.shape[-1], device=class_logits.device)
    weight[present] = 1.0 / counts.float()
    logits = class_logits.narrow(1, 0, valid.shape[1]).flatten(0, 1)[valid.flatten()]
    return F.cross_entropy(logits, targets, weight=weight)
# --8<-- [end:helpers]


running_loss = torch.zeros((), device=session.device)
# --8<-- [start:loop]
for step, (images, flat_masks, flat_classes, n_objects) in session.steps(session.batches):
    traced = session.total_steps < NOMINAL or step >= NOMINAL  # a traced pair's run, or a traced tail step
    pad, mloss, closs = (pad_targets, mask_loss, class_loss) if traced else (lab_pad_targets, lab_mask_loss, lab_class_loss)
    mask_logits, class_logits = model(images)
    masks, classes, valid = pad(flat_masks, flat_classes, n_objects)
    loss = mloss(mask_logits, masks, valid) + closs(class_logits, classes, valid)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()  # no sync: the sum stays on the device
    if session.is_log_step(step):  # one read per logging interval: allowed
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")
# --8<-- [end:loop]

session.finish()
