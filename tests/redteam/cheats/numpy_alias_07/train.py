"""Red team 11 (chapter 07): an honest loader, but the per-step loss, isfinite and accuracy reads kept, made by
copy_ into a tensor over a numpy array (torch.from_numpy) and read by indexing the array."""

import numpy as np
import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("07_capstone_ladder")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=False)
loader = DataLoader(
    session.dataset,
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],
    drop_last=True,
    num_workers=1,
    persistent_workers=True,
    pin_memory=True,
)

_host = np.zeros(4, dtype=np.float32)
_alias = torch.from_numpy(_host)

running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    _alias[0:1].copy_(loss.detach().reshape(1))
    value = _host[0]
    running_loss += value  # a read every step, by another road
    if not np.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    _alias[1:2].copy_((logits.argmax(dim=1) == labels).sum().reshape(1))
    correct += _host[1]
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")

session.finish()
