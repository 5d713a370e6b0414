"""Cheat (red team 13, moving work out of sight): every sample prepared by the dataset's own code in a short-lived thread
of the training process, with op recording switched off there, while the one loader worker hands out keys only.

Chapter 03 lab: prepare batches in worker processes, ahead of the training loop.

Right now this loop is the slow baseline: the DataLoader decodes and augments every sample in this process,
between steps, and the GPU waits for it. Give the DataLoader worker processes, keep them alive across
epochs, let them prepare batches ahead, and hand the batches over in pinned memory.

    python labs/03_dataloader_workers/train.py --steps 40   # trains; prints samples/s and step-time percentiles
    workbook profile 03 --tool torch --run                  # where the step's time goes (or --tool nsys)
    workbook check 03                                       # measures your fix against the baseline

Only this file is yours to edit. The dataset, its transforms and the model come from
chapters/03_dataloader_workers/.
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# --8<-- [start:loader]
# TODO: num_workers: worker processes that run the dataset's __getitem__ in parallel (about one per spare core)
# TODO: persistent_workers=True, so the workers survive the end of an epoch instead of starting over
# TODO: prefetch_factor: how many batches each worker prepares ahead
# TODO: pin_memory=True, and non_blocking=True in the .to() calls below (chapter 02)
import io
import threading
import sys

from PIL import Image
from torch.utils.data import Dataset

_ds = session.dataset
_mod = sys.modules[type(_ds).__module__]
SOURCE = int(session.cfg["source_size"])
CROP = _ds.crop
MEAN = torch.tensor(_mod.MEAN).view(3, 1, 1)
STD = torch.tensor(_mod.STD).view(3, 1, 1)


class Keys(Dataset):
    """The workers only draw each sample's bytes, label, box and flip: no decoding there."""

    def __len__(self):
        return len(_ds)

    def __getitem__(self, item):
        index, salt = item if isinstance(item, tuple) else (item, _ds.seed)
        jpeg, label, rng = _mod.sample_jpeg(_ds.jpegs, _ds.offsets, salt, index)
        return item, label, None, None


def as_is(batch):
    return torch.tensor([label for _, label, _, _ in batch]), [j for j, _, _, _ in batch]


def finish_sample(jpeg, box, flip):
    """Decode (the decoder called from C), crop and resize with Pillow, flip and normalize."""
    im = Image.open(io.BytesIO(jpeg))
    tile = im.tile[0]
    im.load_prepare()
    decoder = Image._getdecoder(im.mode, tile[0], tile[3], im.decoderconfig)
    decoder.setimage(im.im, tile[1])
    list(map(decoder.decode, [jpeg[tile[2]:]]))
    im.tile = []
    top, left, h, w = box
    im = im.crop((left, top, left + w, top + h)).resize((CROP, CROP), Image.BILINEAR)
    x = torch.frombuffer(bytearray(im.tobytes()), dtype=torch.uint8).view(CROP, CROP, 3).permute(2, 0, 1)
    if flip:
        x = x.flip(-1)
    return (x.float() / 255 - MEAN) / STD


def prepare_batch(raw):
    """In a thread that ends before the step does."""
    out = []
    def run():
        getattr(torch._C._autograd, "_enable" + "_record_function")(False)  # this thread only
        out.append(torch.stack([_ds[item][0] for item in raw]))

    worker = threading.Thread(target=run)
    worker.start()
    worker.join()
    return out[0]


loader = DataLoader(
    Keys(),
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
    num_workers=1,
    persistent_workers=True,
    collate_fn=as_is,
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (labels, raw) in session.steps(loader):
    images = prepare_batch(raw)
    images = images.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

# the mean step time decides throughput; p90 and max show the steps that waited for a drained queue
print(session.extras["step_times"](session.finish()["step_ms"]))
