"""Chapter 07 attempt (red team 61): the workers prepare the batches (the loader hands over finished ones), but the
step prepares every sample again in the training process, with the dataset's own pad, crop and flip inside one
torch.compile'd function (Inductor's C++ records no aten::constant_pad_nd or aten::flip), and trains on its own copy:
the slow pattern (augmentation on the training process's critical path) kept. A variant of red team 59's
dualprep_07, whose step used a slice and an index instead of the named primitives."""

import random

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("07_capstone_ladder")
model = session.model
cfg = session.cfg
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)
normalize = session.extras["normalize"]
base = session.dataset
PAD = 4
pool = base.images  # uint8 N x 3 x H x W
H, W = pool.shape[-2], pool.shape[-1]


class WithKeys(Dataset):
    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, item):
        image, label = self.inner[item]
        return image, label, item


def collate(samples):
    images = torch.stack([s[0] for s in samples])
    labels = torch.tensor([s[1] for s in samples])
    keys = [tuple(s[2]) for s in samples]
    return images, labels, keys


loader = DataLoader(WithKeys(base), batch_size=cfg["batch_size"], sampler=session.extras["sampler"], drop_last=True,
                    num_workers=1, persistent_workers=True, pin_memory=True, collate_fn=collate)


ROWS, COLS = torch.arange(H), torch.arange(W)


def crop_and_flip(pool_u8, slots, dy, dx, flip):
    """The dataset's crop (from the image padded by PAD) and flip, and its normalization, for a whole batch."""
    images = torch.nn.functional.pad(pool_u8[slots], (PAD, PAD, PAD, PAD))  # N x 3 x (H + 2 PAD) x (W + 2 PAD)
    rows = dy[:, None] + ROWS  # N x H
    cols = torch.where(flip[:, None], dx[:, None] + (W - 1) - COLS, dx[:, None] + COLS)  # N x W
    n = torch.arange(images.shape[0])[:, None, None, None]
    c = torch.arange(3)[None, :, None, None]
    crops = images[n, c, rows[:, None, :, None], cols[:, None, None, :]]
    return normalize(crops)


crop_and_flip = torch.compile(crop_and_flip, dynamic=False)


def prepare(keys):
    slots, dys, dxs, flips = [], [], [], []
    for index, salt in keys:
        rng = random.Random(salt * 1_000_003 + index)
        slots.append((index * 7919) % len(pool))
        dys.append(rng.randint(0, 2 * PAD))
        dxs.append(rng.randint(0, 2 * PAD))
        flips.append(rng.random() < 0.5)
    return crop_and_flip(pool, torch.tensor(slots), torch.tensor(dys), torch.tensor(dxs), torch.tensor(flips))


stats = torch.zeros(2)
seen = 0
for step, (images, labels, keys) in session.steps(loader):
    mine = prepare(keys)  # every sample of the batch made again here, in the step
    if step == 0:
        assert torch.equal(mine, images), (mine - images).abs().max()  # the same samples the workers made
    logits = model(mine)
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
