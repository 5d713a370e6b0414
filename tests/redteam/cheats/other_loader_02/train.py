"""Chapter 02: a DataLoader that reports pin_memory=True while its batches come from a pageable loader."""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("02_pageable_copies")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


class Loader(DataLoader):
    def __iter__(self):  # not one of the settings the harness looks for: the subclass is not "redefining" any
        return iter(self.pageable)


loader = Loader(session.dataset, batch_size=None, pin_memory=True)
loader.pageable = DataLoader(session.dataset, batch_size=None)  # pin_memory=False: what is really iterated
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)  # blocking copy from pageable memory, as in the slow script
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
