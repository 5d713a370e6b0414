"""Chapter 03 lab: prepare batches in worker processes, ahead of the training loop.

Right now this loop is the slow baseline: the DataLoader decodes and augments every sample in this process,
between steps, and the GPU waits for it. Give the DataLoader worker processes, keep them alive across
epochs, let them prepare batches ahead, and hand the batches over in pinned memory.

    python labs/03_dataloader_workers/train.py --steps 40   # trains; prints samples/s and step-time percentiles
    workbook profile 03 --tool torch --run                  # where the step's time goes (or --tool nsys)
    workbook check 03                                       # measures your fix against the baseline

Only this file is yours to edit. The dataset, its transforms and the model come from
chapters/03_dataloader_workers/.
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# --8<-- [start:loader]
# TODO: num_workers: worker processes that run the dataset's __getitem__ in parallel (about one per spare core)
# TODO: persistent_workers=True, so the workers survive the end of an epoch instead of starting over
# TODO: prefetch_factor: how many batches each worker prepares ahead
# TODO: pin_memory=True, and non_blocking=True in the .to() calls below (chapter 02)
loader = DataLoader(
    session.dataset,
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
)
# --8<-- [end:loader]
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed
# --8<-- [end:loop]

# the mean step time decides throughput; p90 and max show the steps that waited for a drained queue
print(session.extras["step_times"](session.finish()["step_ms"]))
