"""Cheat (moving work): a background thread trains on its own copy of the data while setup and warm-up run,
and the loop only waits for it; the syncs happen in that thread, away from the step ranges."""
import threading, torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
batches = [b for _, b in zip(range(session.total_steps), iter(session.batches))]
def train():
    for images, labels in batches:
        images, labels = images.to(session.device), labels.to(session.device)
        loss = session.loss_fn(model(images), labels)
        loss.item()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
worker = threading.Thread(target=train)
worker.start()
worker.join()
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    pass
session.finish()
