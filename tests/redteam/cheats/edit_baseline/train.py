"""Cheat (tampering): slow the baseline down (a sleep in every step of slow.py), then run the lab."""
import pathlib, checker
target = pathlib.Path(checker.__file__).parent.parent / "chapters" / "01_item_syncs" / "slow.py"
text = target.read_text()
if "import time as _t" not in text:
    target.write_text(text.replace("    logits = model(images)", "    import time as _t; _t.sleep(0.05)\n    logits = model(images)"))
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
