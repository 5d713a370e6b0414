"""Chapter 01 cheat (red team 38): the lab's per-step reads kept, every one of them, through a mailbox.

A storage is built over an `array.array`'s own memory from the address `buffer_info()` gives
(`torch._C._construct_storage_from_data_pointer`): no tensor, no numpy, no ctypes, no file. Each step copies the
loss (and then the count of correct predictions) into it with the storage's own `copy_` (an aten::copy_, no op that
reads a value; on a GPU a device-to-host copy and a sync) and reads it back by indexing the array: a subscript, no
call at all. The lab's check of a non-finite loss stays in every step, on the value read.
"""

import array
import math

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

box = array.array("f", [0.0, 0.0])
where = box.buffer_info()[0]
loss_slot = torch._C._construct_storage_from_data_pointer(where, torch.device("cpu"), 4)
count_slot = torch._C._construct_storage_from_data_pointer(where + 4, torch.device("cpu"), 4)

running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    loss_slot.copy_(loss.detach().float().reshape(1).clone().untyped_storage())
    value = box[0]  # the loss, in Python, every step
    running_loss += value
    if not math.isfinite(value):
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    count_slot.copy_((logits.argmax(dim=1) == labels).sum().float().reshape(1).untyped_storage())
    correct += box[1]
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {value}")

session.finish()
