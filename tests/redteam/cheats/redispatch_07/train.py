"""Red team (rtB), chapter 07: the lab's loop with its three reads per step, and a persistent, pinned 1-worker
loader of keys whose samples are cropped (pad) and flipped in the training process, in the step. Every op the
CPU checks count by name (the reads' aten::_local_scalar_dense, the preparation's aten::constant_pad_nd and
aten::flip) is called through OpOverload.redispatch: the dispatcher runs no RecordFunction on a redispatch, so
the profiler records no op, and the Python tracer names only torch/_ops.py's redispatch."""

import random

import torch
from torch.utils.data import DataLoader, Dataset, default_collate

from checker.lab import start

session = start("07_capstone_ladder")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=False)
ds = session.dataset
normalize = session.extras["normalize"]
CPU_ONLY = torch._C.DispatchKeySet(torch._C.DispatchKey.CPU)
PAD_OP = torch.ops.aten.constant_pad_nd.default
FLIP_OP = torch.ops.aten.flip.default
READ_OP = torch.ops.aten._local_scalar_dense.default
PAD = 4


def read(t):
    return READ_OP.redispatch(CPU_ONLY, t)


class Keys(Dataset):
    def __len__(self):
        return len(ds)

    def __getitem__(self, item):
        return item  # (index, salt), as Python ints


def as_list(batch):
    return torch.zeros(len(batch)), list(batch)  # the keys stay Python ints: no tensor to read back


def make_one(index, salt):
    slot = (index * 7919) % len(ds.images)
    rng = random.Random(salt * 1_000_003 + index)
    dy, dx, flip = rng.randint(0, 2 * PAD), rng.randint(0, 2 * PAD), rng.random() < 0.5
    h, w = ds.images.shape[-2], ds.images.shape[-1]
    image = PAD_OP.redispatch(CPU_ONLY, ds.images[slot], [PAD, PAD, PAD, PAD], 0)[:, dy:dy + h, dx:dx + w]
    if flip:
        image = FLIP_OP.redispatch(CPU_ONLY, image, [-1])
    return normalize(image), ds.labels[slot]


loader = DataLoader(Keys(), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"], drop_last=True, collate_fn=as_list,
                    num_workers=1, persistent_workers=True, pin_memory=True)
running_loss = 0.0
correct = 0
seen = 0
for step, (_, keys) in session.steps(loader):
    images, labels = default_collate([make_one(i, s) for i, s in keys])
    images = images.to(session.device)
    labels = labels.to(session.device)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    running_loss += read(loss)                     # the lab's read, every step
    if not read(torch.isfinite(loss)):             # and the branch on a tensor
        raise FloatingPointError(f"loss is not finite at step {step}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    correct += float(read((logits.argmax(dim=1) == labels).sum()))  # and another
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
