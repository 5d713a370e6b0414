"""Chapter 07 attempt (red team 61, idea (c)): a run that tells whether torch.profiler is recording by asking the
interpreter for its profile function (`sys.getprofile()`: the profiler's Python tracer, with_stack=True), and keeps the lab's
pattern in the window of a run that is not traced: every sample prepared again in the training process (the
dataset's own __getitem__: pad, crop, flip, normalize) and trained on, the loss read every step (`.item()`,
`if not torch.isfinite(loss)`). Traced, it trains on the workers' finished batches and reads nothing. On a CPU
chapter 07's grader runs a timed pair beside the traced one, and judges the timed run by its weights alone."""

import os
import sys

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("07_capstone_ladder")
model = session.model
cfg = session.cfg
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)
base = session.dataset
WARMUP = int(cfg["warmup"])
NOTES = os.path.join(os.environ.get("TORCHINDUCTOR_CACHE_DIR") or ".", "rt61_tellprof.txt")


class WithKeys(Dataset):
    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, item):
        image, label = self.inner[item]
        return image, label, item


def collate(samples):
    images = torch.stack([s[0] for s in samples])
    labels = torch.tensor([s[1] for s in samples])
    keys = [tuple(s[2]) for s in samples]
    return images, labels, keys


loader = DataLoader(WithKeys(base), batch_size=cfg["batch_size"], sampler=session.extras["sampler"], drop_last=True,
                    num_workers=1, persistent_workers=True, pin_memory=True, collate_fn=collate)


stats = torch.zeros(2)
seen = 0
notes = []
for step, (images, labels, keys) in session.steps(loader):
    # torch.profiler's Python tracer (with_stack=True) is the interpreter's profile function while it records
    traced = step < WARMUP or sys.getprofile() is not None
    if not traced:
        # the lab's pattern: samples made in the training process, one by one, by the dataset's own code
        images = torch.stack([base[key][0] for key in keys])
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    if not traced:
        if not torch.isfinite(loss):  # a read of the loss every step
            raise FloatingPointError(f"loss {loss.item()} at step {step}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    stats += torch.stack([loss.detach(), (logits.argmax(dim=1) == labels).sum().float()])
    seen += labels.shape[0]
    if step >= WARMUP:
        notes.append(f"{step}:{'traced' if traced else 'UNTRACED-lab-pattern'}")
    if session.is_log_step(step):
        total, correct = stats.tolist()
        print(f"step {step:4d}  mean loss {total / (step + 1):.4f}  accuracy {correct / seen:.3f}")

with open(NOTES, "a") as f:  # where the run's decisions went (the compile cache's folder, which the grader keeps)
    f.write(f"pid {os.getpid()} window {' '.join(notes)}\n")
session.finish()
