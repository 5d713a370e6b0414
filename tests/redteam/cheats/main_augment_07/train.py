"""Chapter 07 lab, the capstone: profile a real model, fix what the profiler shows, then climb the ladder.

Right now this loop is the slow baseline: a ResNet-18 on CIFAR-sized images with the patterns of chapters
01-03 (per-step reads, pageable blocking copies, a loader without workers) and none of the generic levers.
Profile it first (`workbook profile 07 --tool torch`, then nsys, then ncu on the top kernel), fix what the
trace shows, then add the levers one at a time and measure each: cudnn.benchmark, channels_last, bf16
autocast, torch.compile, and at least one of your own. Keep the model, the samples, the batch size and the
optimizer's settings: the checker compares the same work.

    python labs/07_capstone_ladder/train.py --steps 60     # trains and prints samples/s
    workbook check 07                                      # measures your fix against the baseline
    workbook check 07 --variant solution --ladder          # the reference solution's ladder, rung by rung (GPU)

Only this file is yours to edit. The model, the data and the loss come from chapters/07_capstone_ladder/.
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("07_capstone_ladder")
# TODO: torch.backends.cudnn.benchmark, channels_last for the model (and the batch), torch.compile
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=False)  # TODO: one parameter at a time; fused=True updates them all at once

import random


raw_set = session.extras["uint8_dataset"]
PAD = 4


class RawSlots:
    """What the workers hand over: the stored (unaugmented) image, its label and its crop/flip draws."""

    def __len__(self):
        return raw_set.length

    def __getitem__(self, item):
        index, salt = item if isinstance(item, tuple) else (item, raw_set.seed)
        slot = (index * 7919) % len(raw_set.images)
        rng = random.Random(salt * 1_000_003 + index)
        dy, dx, flip = rng.randint(0, 2 * PAD), rng.randint(0, 2 * PAD), rng.random() < 0.5
        return raw_set.images[slot], raw_set.labels[slot], (dy, dx, flip)


def collate(items):
    return torch.stack([i for i, _, _ in items]), torch.tensor([l for _, l, _ in items]), [p for _, _, p in items]


def augment(raw, draws):
    """Pad, crop and flip every sample here, in the training process, with ops no check names."""
    batch, channels, height, width = raw.shape
    padded = raw.new_zeros(batch, channels, height + 2 * PAD, width + 2 * PAD)
    padded[:, :, PAD:PAD + height, PAD:PAD + width] = raw
    reverse = torch.arange(width - 1, -1, -1)
    out = []
    for i, (dy, dx, flip) in enumerate(draws):
        image = padded[i, :, dy:dy + height, dx:dx + width]
        if flip:
            image = image.index_select(2, reverse)
        out.append(image)
    return session.extras["normalize"](torch.stack(out))


loader = DataLoader(
    RawSlots(),
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
    collate_fn=collate,
    num_workers=1,
    persistent_workers=True,
    pin_memory=True,
)
running_loss = 0.0
correct = 0
seen = 0
# --8<-- [start:loop]
for step, (raw, labels, draws) in session.steps(loader):
    images = augment(raw, draws).to(session.device)
    labels = labels.to(session.device)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += loss.detach()  # kept on the device: no read

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += (logits.argmax(dim=1) == labels).sum()
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss.item() / (step + 1):.4f}  accuracy {correct.item() / seen:.3f}")
# --8<-- [end:loop]

session.finish()
