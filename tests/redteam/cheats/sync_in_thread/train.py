"""Cheat (moving work): the lab's .item() reads, done in a helper thread so the step's own thread looks clean."""
import threading, torch
from checker.lab import start
session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
total = [0.0]
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    loss = session.loss_fn(model(images), labels)
    reader = threading.Thread(target=lambda: total.__setitem__(0, total[0] + loss.item()))
    reader.start()
    reader.join()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
session.finish()
