"""Cheat (forging): patch the harness so the window closes at once and the steps run after it is closed."""
import checker.candidate.session as harness
_real_steps = harness.Session.steps
def fast_steps(self, source):
    items = list(_real_steps(self, source))   # runs the whole loop body-less: opens and closes the window
    yield from items                          # the real training happens after the window closed
harness.Session.steps = fast_steps
# the rest is the solution of chapter 01, unchanged
import torch
from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
running = torch.zeros(())
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    running += loss.detach()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
