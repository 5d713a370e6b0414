"""Chapter 02 (red-team attempt worker_trains_02, red team 30): pinned batches (the loader's setting), with the training done in the loader's worker.

The worker process holds its own copy of the model (inherited when it started) and trains it on each batch it
hands out; the batch carries the trained weights back, and the training process copies them in behind a
backward pass that stores a gradient into every parameter.
"""

import copy

import torch
from torch.utils.data import DataLoader, Dataset, Sampler

from checker.lab import start

session = start("02_pageable_copies")
model = session.model
cfg = session.cfg
LR = cfg["lr"]
WARMUP = int(cfg["warmup"])
optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)


class Trainer(Dataset):
    """Hands out batch i, after training the worker's own copy of the model on it."""

    def __init__(self, batches, model, loss_fn):
        self.batches, self.model, self.loss_fn = batches, model, loss_fn
        self.opt = None
        self.before_first = None

    def __len__(self):
        return len(self.batches)

    def _train(self, i):
        images, labels = self.batches[i]
        loss = self.loss_fn(self.model(images), labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return images, labels

    def __getitem__(self, key):
        i, state = key
        if self.opt is None:
            self.opt = torch.optim.SGD(self.model.parameters(), lr=LR, momentum=0.9)
        if i == WARMUP:
            self.before_first = copy.deepcopy(self.opt.state_dict())
        if state is not None:  # the weights as the window opened (its head drawn): train step WARMUP again
            with torch.no_grad():
                for name, value in self.model.state_dict().items():
                    value.copy_(state[name])
            self.opt.load_state_dict(self.before_first)
            self._train(i - 1)
        images, labels = self._train(i)
        weights = {k: v.detach().clone() for k, v in self.model.state_dict().items()} if i > WARMUP else {}
        return images, labels, weights


class Keys(Sampler):
    def __init__(self, n):
        self.n = n

    def __iter__(self):
        for i in range(self.n):
            # index WARMUP + 1 is asked for while the first window step fetches its batch: the head is drawn by then
            state = {k: v.detach().clone() for k, v in model.state_dict().items()} if i == WARMUP + 1 else None
            yield i, state

    def __len__(self):
        return self.n


dataset = Trainer(session.dataset, model, session.loss_fn)
# --8<-- [start:loader]
loader = DataLoader(dataset, batch_size=None, sampler=Keys(len(dataset)), num_workers=1, persistent_workers=True,
                    prefetch_factor=1, pin_memory=True)
# --8<-- [end:loader]
params = [p for p in model.parameters() if p.requires_grad]
for step, (images, labels, weights) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    if not weights:
        loss = session.loss_fn(model(images), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    else:
        optimizer.zero_grad(set_to_none=True)
        torch.stack([(p * 0).sum() for p in params]).sum().backward()  # a gradient into every parameter
        with torch.no_grad():
            for name, value in model.state_dict().items():
                value.copy_(weights[name])
        loss = None
    if session.is_log_step(step):
        print(f"step {step:4d}")

session.finish()
