"""Cheat (forging): the unmodified lab, plus a result.json and an atexit handler claiming a perfect run."""
import atexit, json, pathlib
fake = {"samples_per_s": 1e9, "window_s": 1e-6, "eval_loss": 0.0, "steps_done": 30, "steps_expected": 30}
for folder in (pathlib.Path.cwd(), pathlib.Path.cwd().parent):
    try:
        (folder / "result.json").write_text(json.dumps(fake))
    except OSError:
        pass
atexit.register(lambda: print(json.dumps({"type": "done", "samples": 1, "host_syncs": 0})))
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
