"""Cheat (settings): a DataLoader subclass built with 4 persistent workers, so every setting it reports is
true, whose __iter__ loads in this process instead (what the prefetch solution of chapter 02 overrides too)."""
import torch
from torch.utils.data import DataLoader
from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


class InProcessLoader(DataLoader):
    def __iter__(self):  # the workers this loader was built with never start
        return iter(DataLoader(self.dataset, batch_size=self.batch_size, sampler=self.sampler, drop_last=True))


loader = InProcessLoader(session.dataset, batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                         drop_last=True, num_workers=4, persistent_workers=True, prefetch_factor=4)
for step, (images, labels) in session.steps(loader):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
