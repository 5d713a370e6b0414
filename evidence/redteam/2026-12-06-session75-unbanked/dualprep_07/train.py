"""Chapter 07 attempt: the workers prepare the batches (the loader hands over finished ones), but the step
prepares every sample again in the training process, with a slice and an index instead of pad and flip, and
trains on its own copy: the slow pattern (augmentation on the training process's critical path) kept."""

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
padded = torch.nn.functional.pad(pool, (PAD, PAD, PAD, PAD))  # once, in set-up
reverse = torch.arange(W - 1, -1, -1)


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


def prepare(keys):
    crops = []
    for index, salt in keys:
        slot = (index * 7919) % len(pool)
        rng = random.Random(salt * 1_000_003 + index)
        dy, dx, flip = rng.randint(0, 2 * PAD), rng.randint(0, 2 * PAD), rng.random() < 0.5
        crop = padded[slot, :, dy:dy + H, dx:dx + W]
        if flip:
            crop = crop.index_select(-1, reverse)
        crops.append(crop)
    return normalize(torch.stack(crops))


stats = torch.zeros(2)
seen = 0
for step, (images, labels, keys) in session.steps(loader):
    mine = prepare(keys)  # every sample of the batch made again here, in the step
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
