"""Chapter 07: the samples prepared in the training process, in its steps, and laundered through the loader's worker.

The DataLoader's dataset hands out sample keys only. Its single worker, for each batch, hands the training process an
empty shared-memory "slot" for the batch LOOK batches later. In each step the training process crops, flips and
normalizes that later batch itself (a slice of the image pool padded once in set-up, an index_select for the flip:
none of the calls samples_in_workers counts), writes it into the slot, and the worker, when it collates that batch,
waits for the slot and hands the very same pixels back as the batch's images. The batch the loader hands over is
finished (the audit sees the dataset's own samples), but the training process did the preparation. Batches whose keys
the training process cannot know yet (the first LOOK of each epoch) the worker prepares itself.
"""

import random
import time

import torch
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)

DATASET = session.dataset
SAMPLER = session.extras["sampler"]
normalize = session.extras["normalize"]
B, EB = int(cfg["batch_size"]), int(cfg["epoch_batches"])
POOL = len(DATASET.images)
H, W = DATASET.images.shape[-2], DATASET.images.shape[-1]
PAD = 4
LOOK = 2
NUMEL = B * 3 * H * W


class Keys(Dataset):
    def __len__(self):
        return len(DATASET)

    def __getitem__(self, item):
        return item


_SLOTS = {}   # in the worker: batch number -> the slot the training process fills for it
_COUNT = [0]


def collate(keys):  # runs in the worker
    n = _COUNT[0]
    _COUNT[0] += 1
    handed = torch.zeros(1 + NUMEL)  # the slot for batch n + LOOK, handed over with this batch
    _SLOTS[n + LOOK] = handed
    labels = torch.tensor([DATASET.labels[(index * 7919) % POOL] for index, _salt in keys])
    images = None
    slot = _SLOTS.pop(n, None)
    if slot is not None:
        while (flag := slot[0].item()) == 0:
            time.sleep(0.0002)
        if flag > 0:
            images = slot[1:].view(B, 3, H, W).clone()
    if images is None:  # the training process could not know this batch's keys in time
        images = torch.stack([DATASET[key][0] for key in keys])
    return images, labels, handed


loader = DataLoader(Keys(), batch_size=B, sampler=SAMPLER, drop_last=True, num_workers=1,
                    persistent_workers=True, prefetch_factor=2, pin_memory=True, collate_fn=collate)

PADDED = F.pad(DATASET.images, (PAD, PAD, PAD, PAD))  # the whole pool padded once, in set-up
REVERSED = torch.arange(W - 1, -1, -1)


def prepare(items):
    """The dataset's samples of ``items``, made here: crop as a slice, flip as an index, then normalize."""
    crops = []
    for index, salt in items:
        rng = random.Random(salt * 1_000_003 + index)
        dy, dx, flip = rng.randint(0, 2 * PAD), rng.randint(0, 2 * PAD), rng.random() < 0.5
        image = PADDED[(index * 7919) % POOL, :, dy:dy + H, dx:dx + W]
        if flip:
            image = image.index_select(-1, REVERSED)
        crops.append(image)
    return normalize(torch.stack(crops))


stats = torch.zeros(2)
seen = 0
for step, (images, labels, slot) in session.steps(loader):
    target = step + LOOK
    if target // EB == step // EB:  # the later batch is in this epoch: its keys are known here
        within = target % EB
        slot[1:].copy_(prepare(SAMPLER.items[within * B:(within + 1) * B]).flatten())
        slot[:1].fill_(1.0)
    else:
        slot[:1].fill_(-1.0)
    del slot
    images = images.to(session.device)
    labels = labels.to(session.device)
    logits = model(images)
    loss = session.loss_fn(logits, labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    stats += torch.stack([loss.detach(), (logits.argmax(dim=1) == labels).sum().float()])
    seen += labels.shape[0]
    if session.is_log_step(step):
        total_loss, correct = stats.tolist()
        if total_loss != total_loss:
            raise FloatingPointError(f"a non-finite loss before step {step}")
        print(f"step {step:4d}  mean loss {total_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
