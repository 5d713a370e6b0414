"""Chapter 07 (red-team attempt unaudited_batches_07): the samples are padded, cropped and flipped in the training
process, in the step, for every window batch but the two the harness compares.

samples_in_workers asks that the loader's workers prepare every sample. It counts the training process's calls of the
crop's pad and the flip (aten::constant_pad_nd, aten::flip), and since red team 10 the harness also keeps window
batches and compares each with the finished samples of its keys (finished_batches). It keeps the first ones: the
`finished_batches` setting of the workload (2 on a CPU), from the window's first step, which is `session.warmup`.

So the loader's one persistent worker counts the batches it collates (one worker: it collates them in step order) and
hands out finished uint8 samples for exactly those two batches; every other batch is the raw images of its keys and
their random draws as Python values (no tensor read). The step pads them by copying into a zeroed tensor, crops by
slicing and flips by index_select: no op the count names, and the same uint8 pixels the dataset makes, so the
weights are the slow script's. The rest is the solution (float32 on a CPU, one worker, pinned, persistent).

    python train.py --steps 60
"""

import random

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
model = session.model
normalize = session.extras["normalize"]
raw = session.extras["uint8_dataset"]  # its images (uint8, unpadded) and labels; its __getitem__ finishes a sample
PAD = 4
AUDITED = range(session.warmup, session.warmup + 2)  # the batches compared when it was written (finished_batches = 2)
optimizer = torch.optim.SGD(session.model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)


class Keys(Dataset):
    """The sampler's (index, salt) items, handed through to the collate function."""

    def __len__(self):
        return len(raw)

    def __getitem__(self, item):
        return item


_collated = [0]  # in the worker: batches collated so far (its step number)


def collate(items):
    number = _collated[0]
    _collated[0] += 1
    if number in AUDITED:
        return default_collate([raw[item] for item in items])  # finished in the worker, as the harness compares
    images, labels, draws = [], [], []
    for index, salt in items:  # the dataset's own draws (AugmentedImages.__getitem__), made here, applied later
        slot = (index * 7919) % len(raw.images)
        rng = random.Random(salt * 1_000_003 + index)
        draws.append((rng.randint(0, 2 * PAD), rng.randint(0, 2 * PAD), rng.random() < 0.5))
        images.append(raw.images[slot])
        labels.append(raw.labels[slot])
    return [torch.stack(images), torch.tensor(labels), draws]


def finish(images, draws):
    """Pad, crop and flip each sample in the training process, by ops samples_in_workers does not name."""
    batch, channels, height, width = images.shape
    padded = images.new_zeros(batch, channels, height + 2 * PAD, width + 2 * PAD)
    padded[:, :, PAD:PAD + height, PAD:PAD + width] = images  # a slice copy, not a pad op
    backwards = torch.arange(width - 1, -1, -1)
    crops = []
    for i, (dy, dx, flip) in enumerate(draws):
        crop = padded[i, :, dy:dy + height, dx:dx + width]
        crops.append(crop.index_select(2, backwards) if flip else crop)  # a flip by index, not a flip op
    return torch.stack(crops)


loader = DataLoader(
    Keys(),
    batch_size=cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
    num_workers=1,  # one worker: it collates the batches in the order the steps fetch them
    persistent_workers=True,
    prefetch_factor=4,
    pin_memory=True,
    collate_fn=collate,
)
stats = torch.zeros(3, device=session.device)
seen = 0
for step, batch in session.steps(loader):
    if len(batch) == 3:
        images, labels, draws = batch
        images = finish(images, draws)
    else:
        images, labels = batch
    logits = model(normalize(images))
    loss = session.loss_fn(logits, labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    stats += torch.stack([loss.detach().float(), (logits.argmax(dim=1) == labels).sum().float(),
                          (~torch.isfinite(loss.detach())).float()])
    seen += labels.shape[0]
    if session.is_log_step(step):
        total_loss, correct, nonfinite = stats.tolist()  # one transfer, once per logging interval
        if nonfinite:
            raise FloatingPointError(f"a non-finite loss before step {step}")
        print(f"step {step:4d}  mean loss {total_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
