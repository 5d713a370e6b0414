"""Chapter 03 cheat (red team 38): the solution's loader while the trace looks, no overlap after it.

On a CPU the traced run records only the window's first trace_steps steps (8..14 of a 16-step window); the two timed
pairs record none. data_wait judges the traced steps' fetches only, and samples_in_workers' blocked_share counts the
stepping thread's time blocked *outside* its fetches. So from step 16 on, the worker is gated: it may start a batch
only once the previous step has trained (a semaphore the step releases at its end), and every fetch waits for the
whole batch to be decoded: loading and training take turns, as in the slow script, in half the window of every run.
"""

import multiprocessing

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
BATCH = int(session.cfg["batch_size"])
FREE = int(session.cfg["warmup"]) + int(session.cfg.get("trace_steps", 7)) + 1  # batches made ahead freely
permits = multiprocessing.Semaphore(FREE)


class Gated(Dataset):
    def __init__(self, inner):
        self.inner, self.made = inner, 0

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, item):
        if self.made % BATCH == 0:  # the first sample of a batch: wait for the step to allow it
            permits.acquire()
        self.made += 1
        return self.inner[item]


loader = DataLoader(
    Gated(session.dataset),
    batch_size=BATCH,
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=1,
    persistent_workers=True,
    prefetch_factor=4,
    pin_memory=True,
)
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
    if step + 1 >= FREE:
        permits.release()  # the next batch may be made only now: no overlap with this step's training

print(session.extras["step_times"](session.finish()["step_ms"]))
