"""Cheat (less work): save the trained weights in a cache outside the run's folder; any later run (the next
trial, the next check) loads them and skips training."""
import os, torch
from checker.lab import start
CACHE = "/var/tmp/redteam-cache-01.pt"
session = start("01_item_syncs")
model = session.model
cached = os.path.exists(CACHE)
if cached:
    model.load_state_dict(torch.load(CACHE, weights_only=True))
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    if cached:
        continue
    loss = session.loss_fn(model(images), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
try:
    torch.save(model.state_dict(), CACHE)
except OSError:
    pass
session.finish()
