"""Red team 11 (chapter 09): both ranks read the loss and evaluate a rotating quarter of the held-out set every
step, in numpy on bytearray mirrors of the weights (torch.frombuffer): matrix work and reads the trace does not see."""

from contextlib import nullcontext

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])

sampler = DistributedSampler(session.dataset, num_replicas=session.world_size, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // session.world_size, sampler=sampler,
                    pin_memory=session.device.type == "cuda")
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)


def mirror(shape, dtype=torch.float32, np_dtype=np.float32):
    n = 1
    for s in shape:
        n *= s
    buf = bytearray(max(n, 1) * np.dtype(np_dtype).itemsize)
    t = torch.frombuffer(buf, dtype=dtype)[:n].view(*shape) if shape else torch.frombuffer(buf, dtype=dtype)[:1]
    a = np.frombuffer(buf, dtype=np_dtype)[:n].reshape(shape) if shape else np.frombuffer(buf, dtype=np_dtype)[:1]
    return t, a


eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]
xi_t, xi = mirror(tuple(eval_inputs.shape))
xi_t.copy_(eval_inputs)
yt_t, yt = mirror(tuple(eval_targets.shape), torch.int64, np.int64)
yt_t.copy_(eval_targets)
layers = []
for module in session.model:
    if isinstance(module, torch.nn.Linear):
        layers.append(("linear", mirror(tuple(module.weight.shape)), mirror(tuple(module.bias.shape)), module))
    else:
        layers.append(("relu",))
loss_t, loss_a = mirror((1,))

losses = []
for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    micro = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for index, (micro_inputs, micro_targets) in enumerate(micro):
        with nullcontext() if index == len(micro) - 1 else model.no_sync():
            loss = session.loss_fn(model(micro_inputs), micro_targets) / ACCUM
            loss.backward()
    optimizer.step()
    # every rank: the loss and a held-out evaluation, every step, on host mirrors
    with torch.no_grad():
        loss_t.copy_(loss.detach().reshape(1))
        for layer in layers:
            if layer[0] == "linear":
                layer[1][0].copy_(layer[3].weight)
                layer[2][0].copy_(layer[3].bias)
    losses.append(float(loss_a[0]) * ACCUM)
    part = len(xi) // 4
    lo = (step % 4) * part
    h = xi[lo:lo + part]
    for layer in layers:
        h = h @ layer[1][1].T + layer[2][1] if layer[0] == "linear" else np.maximum(h, 0)
    accuracy = float((h.argmax(axis=1) == yt[lo:lo + part]).mean())
    if session.is_main and session.is_log_step(step):
        print(f"step {step:4d}  loss {losses[-1]:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
