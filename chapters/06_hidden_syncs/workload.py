"""Chapter 06's workload: a small instance-segmentation-like model and its packed targets.

Each image holds between 0 and ``max_objects`` objects; each object is a rectangle of one class, painted into
the image in its class's colour. A batch carries its targets *packed*, as a detection collate function makes
them: the objects of every image one after another (``flat_masks``, ``flat_classes``) and how many belong to
each image (``n_objects``). The model predicts, for each image, ``max_objects`` slots: a mask and a class per
slot. Slot i of an image is trained on that image's object i (a fixed assignment, no matching).

The loss is the script's (the lab's helpers); this module holds the blocks every variant shares: the model,
the data, and the held-out evaluation. Nothing here makes the host wait for the device.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from checker.base.workloads import KeyedOrder, Workload


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


def pack(images: torch.Tensor, objects: list, device: torch.device) -> tuple[torch.Tensor, ...]:
    """One batch as a collate function packs it: images, flat_masks (T, S, S), flat_classes (T,), n_objects (B,)."""
    size = images.shape[-1]
    flat_masks = torch.cat([m for _, m, _ in objects]) if objects else torch.zeros(0, size, size)
    flat_classes = torch.cat([c for _, _, c in objects]).long()
    n_objects = torch.tensor([n for n, _, _ in objects], dtype=torch.long)
    return tuple(t.to(device) for t in (images, flat_masks, flat_classes, n_objects))


def make_batches(count: int, batch_size: int, size: int, max_objects: int, num_classes: int, colours, generator,
                 device) -> list[tuple[torch.Tensor, ...]]:
    batches = []
    for _ in range(count):
        images, objects = make_images(batch_size, size, max_objects, num_classes, colours, generator)
        if objects[0][0] == 0:  # every batch holds at least one object (the loss's guard never fires)
            masks, classes = torch.zeros(1, size, size), torch.zeros(1, dtype=torch.long)
            masks[0, :size // 2, :size // 2] = 1.0
            images[0] += colours[0].view(3, 1, 1) * masks[0]
            objects[0] = (1, masks, classes)
        batches.append(pack(images, objects, device))
    return batches


def padded_targets(objects: list, max_objects: int, size: int):
    """Host-side padding of the held-out batch's targets (built once, outside any step)."""
    masks = torch.zeros(len(objects), max_objects, size, size)
    classes = torch.zeros(len(objects), max_objects, dtype=torch.long)
    valid = torch.zeros(len(objects), max_objects, dtype=torch.bool)
    for index, (n, m, c) in enumerate(objects):
        masks[index, :n], classes[index, :n], valid[index, :n] = m, c, True
    return masks, classes, valid


def build(cfg: dict, device: torch.device) -> Workload:
    seed = int(cfg.get("seed", 0))
    generator = torch.Generator().manual_seed(seed)
    size, max_objects, num_classes = int(cfg["image_size"]), int(cfg["max_objects"]), int(cfg["num_classes"])
    colours = 1.5 * torch.randn(num_classes, 3, generator=generator)
    batches = make_batches(int(cfg.get("batches", 16)), int(cfg["batch_size"]), size, max_objects, num_classes,
                           colours, generator, device)
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

    order = KeyedOrder(batches)
    return Workload(model=model, loss_fn=F.binary_cross_entropy_with_logits, eval_loss=eval_loss, batches=order,
                    extras={"max_objects": max_objects, "num_classes": num_classes}, on_window=order.set_key)
