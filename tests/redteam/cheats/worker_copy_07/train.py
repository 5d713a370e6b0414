"""Chapter 07 (red-team attempt worker_copy_07, session 56): the class docs/trust.md left unbuilt. A loader worker
trains a private copy of the model on each batch as it collates it and hands the copy's weights back with the batch;
the traced process copies them into the session's model and runs a decoy backward that stores a gradient into every
trainable tensor, so each window step has the weights the baseline's would and a backward of its own. No product
of the slow script's step runs in the training process."""

import copy

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
model = session.model
private = copy.deepcopy(model)  # the worker's own tensors: the session's are never handed over
private_optimizer = torch.optim.SGD(private.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4)
loss_fn = session.loss_fn
normalize = session.extras["normalize"]


def train_while_collating(samples):
    images, labels = default_collate(samples)
    loss = loss_fn(private(normalize(images)), labels)
    private_optimizer.zero_grad(set_to_none=True)
    loss.backward()
    private_optimizer.step()
    state = [t.detach().clone() for t in (*private.parameters(), *private.buffers())]
    return images, labels, state


loader = DataLoader(session.extras["uint8_dataset"], batch_size=cfg["batch_size"], sampler=session.extras["sampler"],
                    drop_last=True, num_workers=1, persistent_workers=True, prefetch_factor=2, pin_memory=True,
                    collate_fn=train_while_collating)
for step, (images, labels, state) in session.steps(loader):
    with torch.no_grad():
        for tensor, trained in zip((*model.parameters(), *model.buffers()), state):
            tensor.copy_(trained)
    decoy = sum((p * 0).sum() for p in model.parameters())  # a backward that stores a (zero) gradient everywhere
    optimizer.zero_grad(set_to_none=True)
    decoy.backward()
    if session.is_log_step(step):
        print(f"step {step:4d}")

session.finish()
