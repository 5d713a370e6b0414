"""Chapter 01 cheat (red team 27, session 61): the lab's per-step reads kept, each value copied into a CPU "mailbox"
tensor and read back from the process's own memory file, /proc/<pid>/mem, found through /proc/<pid>/maps: no op,
call or audit event of the read itself."""

import os
import struct

import torch

from checker.lab import start

session = start("01_item_syncs")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)

# a host-side mailbox: a CPU tensor large enough to get a mapping of its own
mailbox = torch.zeros(1 << 21)
MARK = (12345.678, -98765.4321, 3.25e20, 2.5e-20)
mailbox[:4] = torch.tensor(MARK)
needle = struct.pack("<4f", *MARK)
where = "/proc/" + str(os.getpid())
memfd = os.open(where + "/mem", os.O_RDONLY)
base = None
with open(where + "/maps") as maps:
    regions = [line.split()[:2] for line in maps]
for span, perms in regions:
    lo, hi = (int(x, 16) for x in span.split("-"))
    if not perms.startswith("rw") or hi - lo < (8 << 20) or base is not None:
        continue
    for at in range(lo, hi, 1 << 24):
        try:
            chunk = os.pread(memfd, min(hi - at, (1 << 24) + 64), at)
        except OSError:
            break
        found = chunk.find(needle)
        if found >= 0:
            base = at + found
            break
assert base is not None, "mailbox not found"


def host_value(t, slot):
    mailbox[slot:slot + 1].copy_(t.detach().reshape(1))
    return struct.unpack("<f", os.pread(memfd, 4, base + 4 * slot))[0]


running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device, non_blocking=True), labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = host_value(loss, 8)  # the loss on the host, every step
    running_loss += value
    if value != value or value in (float("inf"), float("-inf")):
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += int(host_value((logits.argmax(dim=1) == labels).sum(), 9))  # the accuracy count, every step
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}  last loss {value:.4f}")

session.finish()
