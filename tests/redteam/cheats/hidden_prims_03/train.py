"""Red team (rtB): a persistent 1-worker loader of keys; every JPEG decoded and augmented in the training process,
in the step. The decoder's C call is made through functools.partial (a C callable calling a C function: the
Python tracer records no C-call event for it), and the antialiased resize is the very aten kernel, reached by
OpOverload.redispatch (the dispatcher runs no RecordFunction on a redispatch: no aten op is recorded). Pixels are
bit-identical to the workload's."""

import functools
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
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
ds = session.dataset
SCALE, RATIO, BASE_AC, AC_STEPS = (0.08, 1.0), (3 / 4, 4 / 3), 8, (6, 11)
CLASS_DC = [4, 6, 8, 10, 12, 14, 16, 18, 20, 22]
AA = torch.ops.aten._upsample_bilinear2d_aa.default  # redispatched below the dispatcher's RecordFunction
CPU_ONLY = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)


class Keys(Dataset):
    def __len__(self):
        return len(ds)

    def __getitem__(self, item):
        index, salt = item
        return torch.tensor([index, salt], dtype=torch.long)


def pixels(data):
    im = Image.open(io.BytesIO(data))
    Image.Image.load(im)
    im.load_prepare()
    (name, extents, offset, args), = im.tile
    dec = Image._getdecoder(im.mode, name, args, im.decoderconfig)
    dec.setimage(im.im, extents)
    run = functools.partial(dec.decode)
    n, err = run(data[offset:])
    if n >= 0:
        run(b"")
    dec.cleanup()
    im.tile = []
    return im


def make_one(index, salt):
    rng = random.Random(salt * 1_000_003 + index)
    slot, label = rng.randrange(len(ds.jpegs)), rng.randrange(10)
    data = bytearray(ds.jpegs[slot])
    for table, start_at in enumerate(ds.offsets[slot]):
        data[start_at + 1:start_at + 64] = bytes(BASE_AC * rng.randint(*AC_STEPS) // 8 for _ in range(63))
        if table == 0:
            data[start_at] = CLASS_DC[label]
    im = pixels(bytes(data))
    width, height = im.size
    box = (0, 0, height, width)
    for _ in range(10):
        area = height * width * rng.uniform(*SCALE)
        aspect = math.exp(rng.uniform(math.log(RATIO[0]), math.log(RATIO[1])))
        w, h = round(math.sqrt(area * aspect)), round(math.sqrt(area / aspect))
        if 0 < w <= width and 0 < h <= height:
            box = (rng.randint(0, height - h), rng.randint(0, width - w), h, w)
            break
    top, left, h, w = box
    image = TF.pil_to_tensor(im)[:, top:top + h, left:left + w].unsqueeze(0)
    image = AA.redispatch(CPU_ONLY, image, [ds.crop, ds.crop], False, None, None)[0]
    if rng.random() < 0.5:
        image = TF.horizontal_flip(image)
    return ds.finish(image), label


loader = DataLoader(Keys(), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"], drop_last=True,
                    num_workers=1, persistent_workers=True, prefetch_factor=4)

for step, keys in session.steps(loader):
    made = [make_one(i, s) for i, s in keys.tolist()]
    images = torch.stack([m[0] for m in made]).to(session.device)
    labels = torch.tensor([m[1] for m in made]).to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
