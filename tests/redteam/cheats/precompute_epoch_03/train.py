"""Cheat (moving work before the window): decode and augment every sample of the dataset in set-up, before
session.steps(), then train from memory on the batches the sampler orders, with workers to pass
loader_settings. The samples the window trains on are made before the window opens."""
import torch
from torch.utils.data import DataLoader
from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
dataset = session.dataset
ready = {index: dataset[index] for index in range(len(dataset))}  # every sample, decoded and augmented now
sampler = session.extras["sampler"]
loader = DataLoader(dataset, batch_size=session.cfg["batch_size"], sampler=sampler,
                    num_workers=max(1, session.cfg.get("cheat_workers", 2)), persistent_workers=True,
                    pin_memory=session.device.type == "cuda")


class FromMemory:
    """The loader's batches, but made from memory: only the order is taken from the sampler."""

    def __iter__(self):
        batch = []
        for item in sampler:
            index = item[0] if isinstance(item, tuple) else item
            batch.append(ready[index])
            if len(batch) == session.cfg["batch_size"]:
                yield torch.stack([x for x, _ in batch]), torch.tensor([y for _, y in batch])
                batch = []


def batches():
    while True:
        yield from FromMemory()


session_loader = loader  # what loader_settings reads
for step, (images, labels) in session.steps(batches()):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
