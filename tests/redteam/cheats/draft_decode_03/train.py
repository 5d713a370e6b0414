"""Chapter 03 lab."""

import io
import math

import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms.v2 import functional as TF

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
ds = session.dataset
SCALE, RATIO, BASE_AC, AC_STEPS = (0.08, 1.0), (3 / 4, 4 / 3), 8, (6, 11)
CLASS_DC = [4, 6, 8, 10, 12, 14, 16, 18, 20, 22]
MEAN = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)


class Recipes(Dataset):
    """In the worker: each sample's keyed JPEG bytes, crop box and flip, but no pixels."""

    def __len__(self):
        return len(ds)

    def __getitem__(self, item):
        import random
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


def small(data, need):
    """Decode at the smallest DCT scale that still covers the crop; the decoder's C call made from C."""
    im = Image.open(io.BytesIO(data))
    im.draft("RGB", need)
    Image.Image.load(im)
    im.load_prepare()
    (name, extents, offset, args), = im.tile
    dec = Image._getdecoder(im.mode, name, args, im.decoderconfig)
    dec.setimage(im.im, extents)
    n, _ = next(map(dec.decode, (data[offset:],)))
    if n >= 0:
        next(map(dec.decode, (b"",)))
    dec.cleanup()
    im.tile = []
    return im


def images_of(recipe):
    datas, boxes, flips, labels = recipe
    out = []
    for data, (top, left, h, w), flip in zip(datas, boxes, flips):
        f = max(1, min(8, min(h, w) // ds.crop))
        f = 1 << (f.bit_length() - 1)
        im = small(data, (384 // f, 384 // f))
        s = im.size[0] / 384
        im = im.resize((ds.crop, ds.crop), Image.BILINEAR, box=(left * s, top * s, (left + w) * s, (top + h) * s))
        t = TF.pil_to_tensor(im)
        out.append(t.flip(-1) if flip else t)
    x = (torch.stack(out).float() / 255 - MEAN) / STD
    return x, labels


loader = DataLoader(Recipes(), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                    drop_last=True, num_workers=1, persistent_workers=True, prefetch_factor=4, collate_fn=keep)

for step, recipe in session.steps(loader):
    images, labels = images_of(recipe)
    images = images.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
