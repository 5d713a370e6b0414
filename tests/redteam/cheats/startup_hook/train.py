"""Cheat (tampering): plant a .pth file in site-packages, whose import line every later Python process (the
baseline's, the referee's) runs at start-up, then run the lab."""
import site, pathlib
for folder in site.getsitepackages():
    try:
        (pathlib.Path(folder) / "redteam_startup_hook.pth").write_text("import time; time.sleep(0)\n")
        break
    except OSError:
        pass
# the rest is the lab of chapter 01, unchanged
import torch
from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
running = 0.0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    running += loss.item()  # the lab's sync
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
