"""Chapter 03 lab (red team 46: tell_steps_03).

The traced run is told from the timed runs by its number of steps (warm-up + trace_steps against cfg steps).
Timed runs: the reference solution (decode in a persistent worker). Traced run: the slow pattern, every sample
decoded and resized in the training process's step, the decoder's C call made from C (map) and the antialiased
resize written as elementwise integer ops, so no preparing call shows; its extra CPU time is pooled with the two
timed pairs' honest time.
"""

import io
import math
import random

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.v2 import functional as TF

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, foreach=True)  # bit-identical to the slow script's SGD, a little cheaper
ds = session.dataset
TRACED = session.total_steps == session.warmup + int(session.cfg.get("trace_steps", 7))

SCALE, RATIO, BASE_AC, AC_STEPS = (0.08, 1.0), (3 / 4, 4 / 3), 8, (6, 11)
CLASS_DC = [4, 6, 8, 10, 12, 14, 16, 18, 20, 22]


class Recipes(Dataset):
    """In the worker: each sample's keyed JPEG bytes, crop box and flip; no pixels."""

    def __len__(self):
        return len(ds)

    def __getitem__(self, item):
        index, salt = item
        rng = random.Random(salt * 1_000_003 + index)
        slot, label = rng.randrange(len(ds.jpegs)), rng.randrange(10)
        data = bytearray(ds.jpegs[slot])
        for table, at in enumerate(ds.offsets[slot]):
            data[at + 1:at + 64] = bytes(BASE_AC * rng.randint(*AC_STEPS) // 8 for _ in range(63))
            if table == 0:
                data[at] = CLASS_DC[label]
        height = width = 384
        box = (0, 0, height, width)
        for _ in range(10):
            area = height * width * rng.uniform(*SCALE)
            aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
            w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
            if 0 < w <= width and 0 < h <= height:
                box = (rng.randint(0, height - h), rng.randint(0, width - w), h, w)
                break
        return bytes(data), box, rng.random() < 0.5, label


def keep(items):
    datas, boxes, flips, labels = (list(t) for t in zip(*items))
    return datas, boxes, flips, torch.tensor(labels)


def decode(data):
    """The full JPEG decode; the decoder's C call made from C (no call event names it)."""
    im = Image.open(io.BytesIO(data))
    im.load_prepare()
    (name, extents, offset, args), = im.tile
    dec = Image._getdecoder(im.mode, name, args, im.decoderconfig)
    dec.setimage(im.im, extents)
    n, _ = next(map(dec.decode, (data[offset:],)))
    if n >= 0:
        next(map(dec.decode, (b"",)))
    dec.cleanup()
    im.tile = []
    return TF.pil_to_tensor(im)


_tables = {}


def table(insize, outsize):
    """torch's uint8 antialiased bilinear weights (int16 fixed point), as index and weight tables (out, K)."""
    key = (insize, outsize)
    if key in _tables:
        return _tables[key]
    scale = insize / outsize
    support = scale if scale >= 1.0 else 1.0
    invscale = 1.0 / scale if scale >= 1.0 else 1.0
    rows = []
    for i in range(outsize):
        center = scale * (i + 0.5)
        xmin = max(int(center - support + 0.5), 0)
        xsize = min(int(center + support + 0.5), insize) - xmin
        ws = [max(1.0 - abs((j + xmin - center + 0.5) * invscale), 0.0) for j in range(xsize)]
        tot = sum(ws)
        rows.append((xmin, [w / tot if tot != 0 else 0.0 for w in ws]))
    wmax = max(max(ws) for _, ws in rows)
    prec = 0
    while prec < 22 and int(0.5 + wmax * (1 << (prec + 1))) < (1 << 15):
        prec += 1
    k = max(len(ws) for _, ws in rows)
    idx_rows, wt_rows = [], []
    for xmin, ws in rows:
        vs = [w * (1 << prec) for w in ws]
        wt_rows.append([int(-0.5 + v) if v < 0 else int(0.5 + v) for v in vs] + [0] * (k - len(ws)))
        idx_rows.append([xmin + j for j in range(len(ws))] + [xmin] * (k - len(ws)))
    idx = torch.tensor(idx_rows, dtype=torch.int64)
    wt = torch.tensor(wt_rows, dtype=torch.int32)
    _tables[key] = (idx, wt, prec)
    return _tables[key]


def resample(x, dim, outsize):
    idx, wt, prec = table(x.shape[dim], outsize)
    xi = x.to(torch.int32)
    if dim == 2:
        acc = (xi[:, :, idx] * wt).sum(-1)
    else:
        acc = (xi[:, idx, :] * wt[:, :, None]).sum(2)
    return ((acc + (1 << (prec - 1))) >> prec).clamp(0, 255).to(torch.uint8)


def resized_crop(image, top, left, h, w, size):
    x = image[:, top:top + h, left:left + w]
    if w != size:
        x = resample(x, 2, size)
    if h != size:
        x = resample(x, 1, size)
    return x


def images_of(recipe):
    datas, boxes, flips, labels = recipe
    out = []
    for data, (top, left, h, w), flip in zip(datas, boxes, flips):
        t = resized_crop(decode(data), top, left, h, w, ds.crop)
        out.append(ds.finish(t.flip(-1) if flip else t))
    return torch.stack(out), labels


if TRACED:
    for n in range(1, 385):  # the weight tables, before the window (no pixel in them)
        table(n, ds.crop)
    loader = DataLoader(Recipes(), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                        drop_last=True, num_workers=1, persistent_workers=True, prefetch_factor=4, collate_fn=keep)
else:
    loader = DataLoader(ds, batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                        drop_last=True, num_workers=1, persistent_workers=True, prefetch_factor=4)

for step, batch in session.steps(loader):
    images, labels = images_of(batch) if TRACED else batch
    images = images.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
