"""Cheat (lying to settings checks): a DataLoader with one persistent worker that hands out only the sampler's
keys; every sample is decoded and augmented in the training process, in the step, after the batch arrived, out
of the `data` range (red team, 2026-11-26)."""

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


class Keys(Dataset):
    """What the worker does: nothing but pass the sampler's keys on."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, item):
        index, salt = item
        return torch.tensor([index, salt], dtype=torch.long)


loader = DataLoader(
    Keys(len(session.dataset)),
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=1,
    persistent_workers=True,
    pin_memory=True,
)

for step, keys in session.steps(loader):
    samples = [session.dataset[(int(i), int(s))] for i, s in keys.tolist()]  # the real loading, here
    images = torch.stack([x for x, _ in samples]).to(session.device)
    labels = torch.tensor([y for _, y in samples]).to(session.device)
    loss = session.loss_fn(model(images), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
