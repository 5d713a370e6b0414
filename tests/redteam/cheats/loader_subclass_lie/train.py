"""Cheat (settings): a DataLoader subclass that reports 4 persistent workers and loads in this process."""
import torch
from torch.utils.data import DataLoader
from checker.lab import start
session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
class LyingLoader(DataLoader):
    num_workers = property(lambda self: 4, lambda self, v: None)
    persistent_workers = property(lambda self: True, lambda self, v: None)
    pin_memory = property(lambda self: True, lambda self, v: None)
loader = LyingLoader(session.dataset, batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"], drop_last=True)
for step, (images, labels) in session.steps(loader):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
