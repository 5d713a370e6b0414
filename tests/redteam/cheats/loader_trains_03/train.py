"""Chapter 03 (red-team attempt loader_trains_03): the training runs in the DataLoader's worker process, behind its
own decoding, while the traced process paces itself to it and runs a decoy backward for the trace's counts.

The lesson is decoding overlapped with training. Here one worker process decodes its batches and a thread of the same
process trains on them (the model's weights and buffers in shared memory, moved there before the worker starts), one
batch per step, as the training process allows it. The traced process does no training at all:

* each step it allows the worker to train that step's batch and runs a decoy backward that stores a gradient into
  as many one-element tensors as the model has trainable tensors (same_work's count on a CPU trace is the backward
  nodes each step runs, held against the run's own busiest steps, and the gradients stored, held against the model's
  number of trainable tensors: neither asks which tensors), then waits until the worker has trained the batch and
  collated the next, running tiny ops between short sleeps so that recorded ops cover a share of the step (the CPU
  trace rule) and the process stays mostly idle (its CPU time per step is what samples_in_workers holds against the
  slow script's);
* its fetch then finds the next batch ready: data_wait sees almost no wait. Only an epoch's first fetch waits for the
  worker (the new epoch's indices go out there), and data_wait leaves an epoch's first step out;
* nothing is decoded in it (samples_in_workers counts no decoder call), and the loader has one persistent worker.

The weights are trained exactly as the solution trains them (the same ops in the same order on one thread), so
same_work sees the slow script's weights; the steps the grader times are a paced decoy.

    python train.py --steps 40
"""

import multiprocessing
import threading
import time

import torch
from torch.utils.data import DataLoader, default_collate

from checker.lab import start

session = start("03_dataloader_workers")
cfg = session.cfg
model = session.model
BATCH = int(cfg["batch_size"])
EPOCH = int(cfg["epoch_batches"])

# one one-element leaf per trainable tensor of the model: the gradients a step must be seen to store
decoys = [torch.zeros(1, requires_grad=True) for p in model.parameters() if p.requires_grad]
filler = torch.zeros(1)
model.share_memory()  # weights and buffers in shared memory: the worker's updates are the harness's tensors

allowed = multiprocessing.RawValue("i", -1)  # the last step whose batch the worker may train (the training process writes)
trained = multiprocessing.RawValue("i", -1)  # the last step whose batch it has trained (the worker writes)
collated = multiprocessing.RawValue("i", 0)  # batches the worker has collated so far
_made = []  # in the worker: its batches, oldest first


def collate(samples):
    batch = default_collate(samples)
    _made.append((batch[0].clone(), batch[1].clone()))
    collated.value += 1
    return batch


def trainer():
    """The solution's step, in the worker process, one batch at a time as the training process allows."""
    optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
    done = -1
    while True:
        if allowed.value > done and _made:
            images, labels = _made.pop(0)
            loss = session.loss_fn(model(images), labels)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            done += 1
            trained.value = done
        else:
            time.sleep(0.0005)


def start_trainer(_worker_id):
    threading.Thread(target=trainer, daemon=True).start()


def shadow_step():
    torch.cat(decoys).sum().backward()
    for leaf in decoys:
        leaf.grad = None


def fill(ops=50):
    """Tiny ops: recorded, timed, and nearly free."""
    for _ in range(ops):
        torch.mul(filler, 1.0)


def wait_for(ready, seconds=120.0):
    give_up = time.monotonic() + seconds
    while not ready():
        if time.monotonic() > give_up:
            raise RuntimeError("the loader's worker stopped training")
        fill()
        time.sleep(0.001)


loader = DataLoader(
    session.dataset,
    batch_size=BATCH,
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
    num_workers=1,  # one worker: its batches are the steps' in order
    persistent_workers=True,
    prefetch_factor=4,
    pin_memory=True,
    collate_fn=collate,
    worker_init_fn=start_trainer,
)
for step, (images, labels) in session.steps(loader):
    allowed.value = step
    shadow_step()
    last_of_epoch = (step + 1) % EPOCH == 0  # the next epoch's indices go out in the next fetch
    wait_for(lambda: trained.value >= step and (last_of_epoch or collated.value >= step + 2))
    fill(120)  # the batch on its way through the worker's queue, under recorded ops
    if session.is_log_step(step):
        print(f"step {step:4d}  trained in the loader's worker")

session.finish()
