"""Chapter 07 (red-team attempt worker_trains_07): the whole training step runs in the DataLoader's own worker
process, while the traced process waits for it inside the harness's `data` range and runs a copy of the model on the
meta device for the trace's counts.

* The model's weights and buffers are moved to shared memory before the loader's worker is started, so the worker (a
  child of the training process) trains the very tensors the harness snapshots and sends.
* The loader's sampler is the workload's, wrapped: when the DataLoader asks it for the next batch's first index (in
  `_try_put_index`, right after the step's batch arrived, inside the harness's fetch) it tells the worker to train
  the batch just fetched and waits until it has. So each window step's update happens after the harness's snapshot
  of that step and before the fetch returns: the drawn steps' updates are one SGD step on their whole batch.
* The worker trains as the lab does, reads included (loss.item() every step): no trace looks there. A chapter with
  loader workers does not count other processes' CPU time, and the wait sits in the `data` range, which a CPU
  trace's op coverage leaves out in the chapters about loading data.
* The traced process's step is a forward and backward of a copy of the model on the meta device: as many backward
  nodes as a real step, and a gradient stored into as many trainable tensors as the model has (same_work's count),
  at the dispatcher's cost and with no data.

The loader hands out the uint8 dataset's finished samples (finished_batches compares them), prepared in the worker
(samples_in_workers), with one persistent worker and pinned batches (loader_settings).

    python train.py --steps 60
"""

import copy
import multiprocessing
import threading

import torch
from torch.utils.data import DataLoader, Sampler, default_collate

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
model = session.model
normalize = session.extras["normalize"]
BATCH = int(cfg["batch_size"])
SIZE = int(cfg["image_size"])

shadow = copy.deepcopy(model).to("meta")  # the model's shapes, no data: the traced process's step
shadow_params = list(shadow.parameters())
shadow_images = torch.empty(BATCH, 3, SIZE, SIZE, device="meta")
shadow_labels = torch.empty(BATCH, dtype=torch.long, device="meta")
model.share_memory()  # weights and buffers in shared memory: the worker's updates are the harness's tensors

to_worker, in_worker = multiprocessing.Pipe()
_made = []  # in the worker: the batches it handed out, oldest first


def collate(samples):
    batch = default_collate(samples)
    _made.append((batch[0].clone(), batch[1].clone()))
    return batch


def trainer():
    """The lab's step, in the loader's worker, one batch per request from the training process."""
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)
    running = 0.0
    while True:
        in_worker.recv()
        try:
            images, labels = _made.pop(0)
            logits = model(normalize(images))
            loss = session.loss_fn(logits, labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            running += loss.item()  # the lab's read, every step
            in_worker.send("done")
        except Exception as err:  # noqa: BLE001 - said to the training process, which stops
            in_worker.send(f"{type(err).__name__}: {err}")


def start_trainer(_worker_id):
    threading.Thread(target=trainer, daemon=True).start()


def train_fetched():
    """In the training process, inside the harness's fetch: the worker trains the batch the step just received."""
    to_worker.send("train")
    answer = to_worker.recv()
    if answer != "done":
        raise RuntimeError(f"the worker's step failed: {answer}")


class Handshake(Sampler):
    """The workload's sampler, item for item; asked for a batch's first index, the previous batch is trained first."""

    def __init__(self, inner, batch_size):
        self.inner, self.batch_size = inner, batch_size

    def __len__(self):
        return len(self.inner)

    def __iter__(self):
        for position, item in enumerate(self.inner):
            if position and position % self.batch_size == 0:
                train_fetched()
            yield item
        train_fetched()  # the epoch's last batch


def shadow_step():
    loss = session.loss_fn(shadow(shadow_images), shadow_labels)
    loss.backward()
    for p in shadow_params:
        p.grad = None


loader = DataLoader(
    session.extras["uint8_dataset"],  # the finished uint8 crops and flips
    batch_size=BATCH,
    sampler=Handshake(session.extras["sampler"], BATCH),
    drop_last=True,
    num_workers=1,
    persistent_workers=True,
    prefetch_factor=1,  # one batch ahead: the worker is asked for the next one right after the step's arrived
    pin_memory=True,
    collate_fn=collate,
    worker_init_fn=start_trainer,
)
for step, (images, labels) in session.steps(loader):
    shadow_step()

session.finish()
