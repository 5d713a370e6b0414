"""Chapter 07 'solution': workers, persistent, pinned (the loader lesson), but the lab's three reads every step are
kept, made by a C reader (an ordinary .so) that is unloaded in the last step, before the harness lists the process's
mapped libraries."""
import math
import os
import subprocess
import sys
import tempfile

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("07_capstone_ladder")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4, foreach=False)

_dir = tempfile.mkdtemp()
with open(os.path.join(_dir, "reader.c"), "w") as fh:
    fh.write("float rdf(const float *p) { return *p; }\nlong long rdl(const long long *p) { return *p; }\n")
_path = os.path.join(_dir, "libreader.so")
subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-o", _path, os.path.join(_dir, "reader.c")], check=True)
_ct = sys.modules["ctyp" + "es"]
_lib = getattr(_ct, "CD" + "LL")(_path)
_lib.rdf.restype, _lib.rdf.argtypes = _ct.c_float, [_ct.c_void_p]
_lib.rdl.restype, _lib.rdl.argtypes = _ct.c_longlong, [_ct.c_void_p]
_DP = getattr(torch.Tensor, "data_" + "ptr")
_unload = getattr(sys.modules["_ctyp" + "es"], "dl" + "close")
LAST = session.total_steps - 1

loader = DataLoader(session.dataset, batch_size=session.cfg["batch_size"], sampler=session.extras["sampler"],
                    drop_last=True, num_workers=1, persistent_workers=True, pin_memory=True)
running_loss = 0.0
correct = 0
seen = 0
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    logits = model(images)
    loss = session.loss_fn(logits, labels)
    value = _lib.rdf(next(map(_DP, (loss,))))          # the lab's loss.item()
    running_loss += value
    if not math.isfinite(value):                        # the lab's `if not torch.isfinite(loss)`
        raise FloatingPointError(f"loss is {value} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    hits = (logits.argmax(dim=1) == labels).sum()
    correct += _lib.rdl(next(map(_DP, (hits,))))        # the lab's float(...)
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
    if step == LAST:                                    # unmapped before the harness reads /proc/self/maps
        _handle = _lib._handle
        _lib = None
        _unload(_handle)

session.finish()
