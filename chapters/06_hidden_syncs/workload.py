"""Chapter 06's workload: a small instance-segmentation-like model and its packed targets.

Each image holds between 0 and ``max_objects`` objects; each object is a rectangle of one class, painted into
the image in its class's colour. A batch carries its targets *packed*, as a detection collate function makes
them: the objects of every image one after another (``flat_masks``, ``flat_classes``) and how many belong to
each image (``n_objects``). The model predicts, for each image, ``max_objects`` slots: a mask and a class per
slot. Slot i of an image is trained on that image's object i (a fixed assignment, no matching).

The loss is the script's (the lab's helpers); this module holds the blocks every variant shares: the model,
the data, and the held-out evaluation. Nothing here makes the host wait for the device, except ``reference_loss``:
the helpers' arithmetic as the grader's referee computes it, after the run, to hold a window step's update to one
SGD step on its whole batch (``probe_updates``).

The training batches are drawn on the device as each step fetches one (``draw_batch``), from the run's seed during
warm-up and from the window key once the timed window opens (``KeyedDraws``): no batch of the window exists before
it, so nothing computed from batches in set-up (the helpers' padded targets, say) can be looked up in a step. A
fixed list that the key only reordered could be (red-team cheat cached_targets_06).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from checker.base.workloads import KeyedDraws, Workload


class SlotSegmenter(nn.Module):
    """conv-relu blocks at full resolution, then two heads: a mask per slot (1x1 conv) and a class per slot
    (from the pooled features). The class head is the model's last layer with a weight matrix."""

    def __init__(self, width: int, blocks: int, max_objects: int, num_classes: int):
        super().__init__()
        layers: list[nn.Module] = [nn.Conv2d(3, width, 3, padding=1), nn.ReLU()]
        for _ in range(blocks):
            layers += [nn.Conv2d(width, width, 3, padding=1), nn.ReLU()]
        self.backbone = nn.Sequential(*layers)
        self.mask_head = nn.Conv2d(width, max_objects, 1)
        self.class_head = nn.Linear(width, max_objects * num_classes)
        self.max_objects, self.num_classes = max_objects, num_classes

    def forward(self, images: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.backbone(images)
        mask_logits = self.mask_head(features)  # (B, max_objects, S, S)
        pooled = features.mean(dim=(2, 3))
        class_logits = self.class_head(pooled).view(-1, self.max_objects, self.num_classes)
        return mask_logits, class_logits


def make_images(count: int, size: int, max_objects: int, num_classes: int, colours: torch.Tensor,
                generator: torch.Generator):
    """``count`` images and their objects: a list of (n_objects, masks (n, S, S), classes (n,)) per image."""
    images = 0.3 * torch.randn(count, 3, size, size, generator=generator)
    objects = []
    for index in range(count):
        n = int(torch.randint(0, max_objects + 1, (1,), generator=generator))
        masks = torch.zeros(n, size, size)
        classes = torch.randint(0, num_classes, (n,), generator=generator)
        for k in range(n):
            x0, y0 = torch.randint(0, size - 2, (2,), generator=generator).tolist()
            w, h = torch.randint(2, size // 2 + 1, (2,), generator=generator).tolist()
            masks[k, y0:y0 + h, x0:x0 + w] = 1.0
            images[index] += colours[classes[k]].view(3, 1, 1) * masks[k]
        objects.append((n, masks, classes))
    return images, objects


def draw_batch(generator: torch.Generator, batch_size: int, size: int, max_objects: int, num_classes: int,
               colours: torch.Tensor, objects: int) -> tuple[torch.Tensor, ...]:
    """One packed batch, drawn where ``colours`` lives (the device) with queued ops only: images, flat_masks (T, S, S),
    flat_classes (T,), n_objects (B,).

    Every batch holds ``objects`` objects (T: a number the host knows, so packing reads nothing back; at least one, so
    the loss's guard never fires), spread at random over the images, at most ``max_objects`` each: how many each
    image holds is known only on the device. Each object is a rectangle of one class, painted in its class's colour.
    Matrix products, not scatters, sum the objects into their images: the same result on every run of the same key.
    """
    device = colours.device
    slots = torch.randperm(batch_size * max_objects, generator=generator, device=device)[:objects].sort().values
    image_of = slots // max_objects  # the objects packed image after image, as a collate function packs them
    owner = (image_of[None, :] == torch.arange(batch_size, device=device)[:, None]).to(torch.float32)  # (B, T)
    n_objects = owner.sum(dim=1).long()
    classes = torch.randint(0, num_classes, (objects,), generator=generator, device=device)
    corner = torch.randint(0, size - 2, (objects, 2), generator=generator, device=device)
    extent = torch.randint(2, size // 2 + 1, (objects, 2), generator=generator, device=device)
    pixels = torch.arange(size, device=device)
    inside = (pixels >= corner[:, :, None]) & (pixels < (corner + extent)[:, :, None])  # (T, 2, S): x, then y
    masks = (inside[:, 1, :, None] & inside[:, 0, None, :]).to(torch.float32)  # (T, S, S)
    images = 0.3 * torch.randn(batch_size, 3, size, size, generator=generator, device=device)
    painted = colours[classes][:, :, None, None] * masks[:, None]  # (T, 3, S, S)
    images = images + (owner @ painted.flatten(1)).view_as(images)
    return images, masks, classes, n_objects


def padded_targets(objects: list, max_objects: int, size: int):
    """Host-side padding of the held-out batch's targets (built once, outside any step)."""
    masks = torch.zeros(len(objects), max_objects, size, size)
    classes = torch.zeros(len(objects), max_objects, dtype=torch.long)
    valid = torch.zeros(len(objects), max_objects, dtype=torch.bool)
    for index, (n, m, c) in enumerate(objects):
        masks[index, :n], classes[index, :n], valid[index, :n] = m, c, True
    return masks, classes, valid


def reference_loss(model: nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The slow script's loss of one packed batch, for the referee (outside any step, so it may read values back):
    the mean binary cross-entropy over the real objects' mask pixels, plus the real objects' class cross-entropy with
    each class weighted by 1 / its count in the batch. Object k of an image trains that image's slot k."""
    images, flat_masks, flat_classes, n_objects = batch
    mask_logits, class_logits = model(images)
    device = images.device
    image_of = torch.repeat_interleave(torch.arange(n_objects.shape[0], device=device), n_objects)
    slot_of = torch.arange(image_of.shape[0], device=device) - (torch.cumsum(n_objects, 0) - n_objects)[image_of]
    masks = F.binary_cross_entropy_with_logits(mask_logits[image_of, slot_of], flat_masks)
    present, counts = torch.unique(flat_classes, return_counts=True)
    weight = torch.zeros(class_logits.shape[-1], device=device)
    weight[present] = 1.0 / counts.float()
    return masks + F.cross_entropy(class_logits[image_of, slot_of], flat_classes, weight=weight)


def build(cfg: dict, device: torch.device) -> Workload:
    seed = int(cfg.get("seed", 0))
    generator = torch.Generator().manual_seed(seed)
    size, max_objects, num_classes = int(cfg["image_size"]), int(cfg["max_objects"]), int(cfg["num_classes"])
    colours = 1.5 * torch.randn(num_classes, 3, generator=generator)
    batch_size = int(cfg["batch_size"])
    objects = max(1, min(int(cfg.get("objects", batch_size * max_objects // 2)), batch_size * max_objects))
    device_colours = colours.to(device)
    batches = KeyedDraws(lambda g: draw_batch(g, batch_size, size, max_objects, num_classes, device_colours, objects),
                         per_pass=int(cfg.get("batches", 16)), seed=seed, device=device)
    eval_images, eval_objects = make_images(int(cfg.get("eval_size", 64)), size, max_objects, num_classes, colours,
                                            generator)
    eval_masks, eval_classes, eval_valid = (t.to(device) for t in padded_targets(eval_objects, max_objects, size))
    eval_images = eval_images.to(device)
    model = SlotSegmenter(int(cfg["width"]), int(cfg["blocks"]), max_objects, num_classes).to(device)

    def eval_loss(trained: nn.Module) -> float:
        """Held-out loss: mean mask BCE and mean class cross-entropy over the real objects' slots."""
        mask_logits, class_logits = trained(eval_images)
        bce = F.binary_cross_entropy_with_logits(mask_logits, eval_masks, reduction="none").mean(dim=(2, 3))
        ce = F.cross_entropy(class_logits.flatten(0, 1), eval_classes.flatten(), reduction="none").view_as(bce)
        weight = eval_valid.float()
        return float(((bce + ce) * weight).sum() / weight.sum())

    return Workload(model=model, loss_fn=F.binary_cross_entropy_with_logits, eval_loss=eval_loss, batches=batches,
                    extras={"max_objects": max_objects, "num_classes": num_classes, "probe_loss": reference_loss},
                    on_window=batches.set_key)
