"""Chapter 09 lab (red team): rank 0 still reads the loss and evaluates the model in every step, out of sight."""

import os
import struct
import sys
import tempfile
from contextlib import nullcontext

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

HELPER = r'''
import torch

_IN = torch._C._dispatch_tls_local_include_set()
_EX = torch._C._dispatch_tls_local_exclude_set()


class Probe(torch.Tensor):
    """A 1x1 handle: a product of two of them runs the queued job inside that product."""
    job = None  # (forward, inputs, targets, box, state)

    @staticmethod
    def __new__(cls):
        return torch.Tensor._make_wrapper_subclass(cls, (1, 1), dtype=torch.float32)

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        with torch._C._ForceDispatchKeyGuard(_IN, _EX | torch._C.DispatchKeySet(torch._C.DispatchKey.Python)):
            forward, x, y, box, state = cls.job
            with torch.no_grad():
                box[1].copy_((forward(x).argmax(dim=1) == y).float().mean())
                box[0].copy_(state["loss"])
        return torch.zeros(1, 1)
'''

_where = os.path.join(tempfile.gettempdir(), "lib", "site-packages")
os.makedirs(os.path.join(_where, "einops"), exist_ok=True)
with open(os.path.join(_where, "einops", "__init__.py"), "w") as f:
    f.write("")
with open(os.path.join(_where, "einops", "probe.py"), "w") as f:
    f.write(HELPER)
sys.path.insert(0, _where)
from einops import probe  # noqa: E402

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])

sampler = DistributedSampler(session.dataset, num_replicas=session.world_size, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // session.world_size, sampler=sampler,
                    pin_memory=session.device.type == "cuda")
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]
evaluate = torch.jit.trace(session.model, eval_inputs[:2]).forward  # shares session.model's parameters
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)

# a float64 mailbox backed by a file: values copied in are read back with plain file I/O
_box_path = os.path.join(tempfile.gettempdir(), f"box{session.rank}.bin")
with open(_box_path, "wb") as f:
    f.write(b"\0" * 16)
_box = torch.from_file(_box_path, shared=True, size=2, dtype=torch.float64)
_fh = open(_box_path, "rb")
# rank 0 evaluates the whole held-out set every step; rank 1 the same ops on one sample (the same op count)
_rows = len(eval_inputs) if session.is_main else 1
_x, _y = eval_inputs[:_rows], eval_targets[:_rows]
_state = {}


handle = probe.Probe()
probe.Probe.job = (evaluate, _x, _y, _box, _state)
losses = []
for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    micro_batches = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for index, (micro_inputs, micro_targets) in enumerate(micro_batches):
        last = index == len(micro_batches) - 1
        with nullcontext() if last else model.no_sync():
            loss = session.loss_fn(model(micro_inputs), micro_targets) / ACCUM
            loss.backward()
    optimizer.step()

    _state["loss"] = loss.detach() * ACCUM
    handle @ handle  # every step: the evaluation, inside one 1x1 product
    _fh.seek(0)
    loss_value, accuracy = struct.unpack("dd", _fh.read(16))
    if session.is_main:
        losses.append(loss_value)
        if session.is_log_step(step):
            print(f"step {step:4d}  loss {losses[-1]:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
