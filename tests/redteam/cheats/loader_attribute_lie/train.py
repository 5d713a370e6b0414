"""Cheat (settings): a plain DataLoader with workers that die every epoch, whose attribute is then set to
claim persistent workers."""
import torch
from torch.utils.data import DataLoader
from checker.lab import start
session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
loader = DataLoader(session.dataset, batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                    drop_last=True, num_workers=1)
object.__setattr__(loader, "persistent_workers", True)
for step, (images, labels) in session.steps(loader):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
