"""Chapter 02 (red-team attempt worker_trains_02's second version, red team 32; banked as worker_decoy_02): a loader
worker trains a forked copy of the model one batch behind and hands its weights and momentum back with each batch;
the traced step runs the slow script's products on zeroed images, backward and an optimizer step, then copies the
worker's weights in."""

import time

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from checker.lab import start

session = start("02_pageable_copies")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
named = list(model.state_dict().items())
params = list(model.parameters())
head = [model.fc.weight, model.fc.bias]
warmup = int(session.cfg["warmup"])
box = torch.zeros(sum(t.numel() for t in head) + 1)  # the head the window starts with, and how far the steps are
box[-1] = -1


class Order(Sampler):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __iter__(self):
        yield (0, box)  # sent to the worker once: from then on both sides see the same numbers
        yield from range(1, self.n)


class Prepared(Dataset):
    """Each item is the chapter's batch, with the model as it stands after the batch before it."""

    def __init__(self, source):
        self.source, self.own, self.box, self.pending = source, None, None, None

    def __len__(self):
        return len(self.source)

    def __getitem__(self, item):
        if isinstance(item, tuple):
            item, self.box = item
        images, labels = self.source[item]
        flat = torch.zeros(0)
        if self.pending is not None:
            done = item - 1
            while float(self.box[-1]) < done:
                time.sleep(0.0002)
            if self.own is None:
                self.own = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
            if done == warmup:
                with torch.no_grad():
                    offset = 0
                    for t in head:
                        t.copy_(self.box[offset:offset + t.numel()].view_as(t))
                        offset += t.numel()
            x, y = self.pending
            loss = session.loss_fn(model(x), y)
            self.own.zero_grad(set_to_none=True)
            loss.backward()
            self.own.step()
            moms = [self.own.state[p]["momentum_buffer"] for p in params]
            flat = torch.cat([t.detach().reshape(-1).float() for t in list(model.state_dict().values()) + moms])
        self.pending = (images, labels)
        return images, labels, flat


loader = DataLoader(Prepared(session.dataset), batch_size=None, sampler=Order(len(session.dataset)),
                    num_workers=1, pin_memory=True, prefetch_factor=1)
last = int(session.cfg["steps"]) - 1

for step, (images, labels, flat) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    with torch.no_grad():
        offset = 0
        if flat.numel():
            for name, tensor in named:
                n = tensor.numel()
                if not (step == warmup and name in ("fc.weight", "fc.bias")):
                    tensor.copy_(flat[offset:offset + n].view_as(tensor))
                offset += n
        if step == last:
            for p in params:
                optimizer.state[p]["momentum_buffer"].copy_(flat[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        if step == warmup:
            offset = 0
            for t in head:
                box[offset:offset + t.numel()] = t.reshape(-1)
                offset += t.numel()
        box[-1] = step
    batch = images if step == last else torch.zeros_like(images)  # every step before the last: a step on nothing
    loss = session.loss_fn(model(batch), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
