"""Red team 21 (session 56): chapter 07's lab, its three reads per step kept (loss, isfinite, correct), none counted.

Each value is read through a torch.Generator: the tensor's 8 bytes are cat into a real generator state as its
`the_initial_seed` field, `Generator.set_state` takes them in C, and `Generator.initial_seed()` hands them back as
a Python int (the loss as a float64's bits, unpacked with struct). No aten op reads a value, and neither call is
among syncs.py's PYTHON_READ names. (The loader gets one persistent worker, as chapter 03 teaches, only so
that its own per-epoch seed draw is not a read in the steps.)
"""

import torch
from torch.utils.data import DataLoader

from checker.lab import start

import struct

_GEN = torch.Generator()
_BASE = _GEN.get_state()


def host_bits(t):
    """A one-element tensor's 8 bytes (as int64 or float64) as a Python int, through a generator's state."""
    _GEN.set_state(torch.cat([t.reshape(1).view(torch.uint8), _BASE[8:]]))
    return _GEN.initial_seed()


def host_float(t):
    return struct.unpack("<d", struct.pack("<Q", host_bits(t.detach().to(torch.float64))))[0]


def host_int(t):
    value = host_bits(t.to(torch.int64))
    return value - (1 << 64) if value >= (1 << 63) else value


session = start("07_capstone_ladder")
# TODO: torch.backends.cudnn.benchmark, channels_last for the model (and the batch), torch.compile
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=False)  # TODO: one parameter at a time; fused=True updates them all at once

# TODO: worker processes that outlive an epoch, pinned batches (chapters 02 and 03);
# session.extras["uint8_dataset"] gives the same samples as uint8, for session.extras["normalize"] on the GPU
loader = DataLoader(
    session.dataset,  # float32 samples, normalized on the CPU
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
    num_workers=1,  # the loader's own per-epoch seed read (not a read of the step's values) is out of the steps
    persistent_workers=True,
)
running_loss = 0.0
correct = 0
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)  # TODO: a blocking copy from pageable memory (chapter 02)
    labels = labels.to(session.device)
    logits = model(images)  # TODO: bf16 autocast around the forward pass and the loss
    loss = session.loss_fn(logits, labels)
    running_loss += host_float(loss)  # TODO: a read every step (chapter 01)
    if not host_int(torch.isfinite(loss)):  # TODO: `if tensor` reads it too
        raise FloatingPointError(f"loss is {loss} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += float(host_int((logits.argmax(dim=1) == labels).sum()))  # TODO: and another
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
# --8<-- [end:loop]

session.finish()
