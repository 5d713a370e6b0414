"""Cheat (settings): a DataLoader subclass that answers every attribute read the harness makes with the
chapter's settings, while it loads in this process with no worker."""
import torch
from torch.utils.data import DataLoader
from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
CLAIMS = {"num_workers": 4, "persistent_workers": True, "pin_memory": True, "prefetch_factor": 4}


class ClaimingLoader(DataLoader):
    def __getattribute__(self, name):
        if name in CLAIMS and getattr(type(self), "claiming", False):
            return CLAIMS[name]
        return super().__getattribute__(name)


loader = ClaimingLoader(session.dataset, batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                        drop_last=True)
ClaimingLoader.claiming = True
for step, (images, labels) in session.steps(loader):
    if step == 0:
        ClaimingLoader.claiming = False  # the harness has read the settings: load as what it is
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
