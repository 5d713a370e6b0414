"""Chapter 03 cheat (red team 34): persistent workers that decode every sample, but never ahead of the training.

The worker may start a batch only when the step before it has finished training (a token), and the step then
blocks until the worker has made that batch (a second token), in its own body, after the harness's `data` range
closed. Loading and training take turns exactly as in the slow script; the wait is only moved out of `data`."""

import multiprocessing

import torch
from torch.utils.data import DataLoader, default_collate

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

go = multiprocessing.Semaphore(0)     # main -> worker: you may make the next batch now
ready = multiprocessing.Semaphore(0)  # worker -> main: that batch is made


class Gated:
    """session.dataset, one batch at a time, only when the training process says so."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitems__(self, items):
        go.acquire()  # no prefetch: wait for the training step before this batch to finish
        return [self.inner[item] for item in items]


def collate(samples):
    batch = default_collate(samples)
    ready.release()
    return batch


loader = DataLoader(
    Gated(session.dataset),
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=1,
    persistent_workers=True,
    collate_fn=collate,
)
per_epoch = len(loader)

go.release()  # batch 0
unclaimed = True  # a made batch whose `ready` token is not taken yet
for step, (images, labels) in session.steps(loader):
    if unclaimed:
        ready.acquire()
    images = images.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
    go.release()  # only now may the worker make the next batch
    if (step + 1) % per_epoch:
        ready.acquire()  # the step waits here, outside `data`, while the next batch is decoded: no overlap at all
        unclaimed = False
    else:
        unclaimed = True  # the next epoch's first fetch waits in `data` (an epoch start, which data_wait leaves out)

print(session.extras["step_times"](session.finish()["step_ms"]))
