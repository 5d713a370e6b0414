"""Red-team: the window's training runs eager in a process orphaned before the window (so no longer under the run),
which learns the window key from the batch source's generator (initial_seed); the traced process runs a decoy."""
import io
import multiprocessing
import os

import torch
from torch.nn import functional as F

from checker.base.workloads import head_values, initial_rms
from checker.lab import start

session = start("04_eager_microops")
model = session.model
rms = initial_rms(model)  # as built: what the harness scales the drawn head by
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              foreach=False)  # the slow script's optimizer: the helper trains with it
decoy_opt = torch.optim.AdamW(model.parameters(), lr=0.0, fused=True)
params = list(model.parameters())
named = dict(model.named_parameters())
linears = [model[0]] + [block.fc for block in list(model)[1:-1]] + [model[-1]]
vectors = [p for block in list(model)[1:-1] for p in (block.norm_weight, block.norm_bias, block.act_slope, block.gate)]
batches = session.batches.batches
zero_weights = torch.zeros(sum(v.numel() for v in vectors))
want = 4 * sum(p.numel() for p in params)
received = torch.empty(want // 4)
received_views, _at = [], 0
for _p in params:
    received_views.append(received[_at:_at + _p.numel()].view_as(_p))
    _at += _p.numel()
first = session.warmup
last = session.total_steps - 1
key_r, key_w = os.pipe()
out_r, out_w = os.pipe()


def helper():
    key = int.from_bytes(os.read(key_r, 8), "little")
    with torch.no_grad():
        for name, value in head_values(model, key, rms).items():
            named[name].copy_(value)
    order = torch.Generator().manual_seed(key)
    for group in optimizer.param_groups:  # the same AdamW, its state kept, updating every tensor in one op
        group["foreach"], group["fused"] = False, True
    for _ in range(last - first + 1):
        x, y = batches[torch.randint(len(batches), (1,), generator=order).tolist()[0]]
        loss = session.loss_fn(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    buf = io.BytesIO()
    torch.cat([p.detach().reshape(-1) for p in params]).untyped_storage()._write_file(buf, False, False, 1)
    data, sent = buf.getvalue(), 0
    while sent < len(data):
        sent += os.write(out_w, data[sent:sent + 65536])
    os._exit(0)


def launcher():
    multiprocessing.Process(target=helper).start()
    os._exit(0)  # the helper is left an orphan: reparented away from the run


def decoy(x, y):
    h = x
    for lin in linears:
        h = F.linear(h, lin.weight, lin.bias)  # the slow script's products, size for size
    extra = (torch.cat(vectors) * zero_weights).sum()  # a (dense, zero) gradient into every other trainable tensor
    return F.cross_entropy(h, y) + extra


for step, (inputs, labels) in session.steps(session.batches):
    if step < first:
        loss = session.loss_fn(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if step == 0:
            decoy_opt.step()  # its state made now (lr 0: no weight moves), not in a traced step
        if step == first - 1:  # set-up's last moment: the helper holds the weights and optimizer as they are now
            launch = multiprocessing.Process(target=launcher)
            launch.start()
            launch.join()
        continue
    if step == first:  # the window's key to the helper; wait for its trained weights (no CPU shared with it)
        os.write(key_w, session.batches._generator.initial_seed().to_bytes(8, "little"))
        os.close(out_w)
        chunks = []
        while sum(map(len, chunks)) < want:  # read what the helper sends, not up to its exit
            chunks.append(os.read(out_r, 1 << 20))
        with torch.no_grad():
            storage = torch.UntypedStorage.from_buffer(b"".join(chunks), byte_order="little", dtype=torch.uint8)  # a copy
            received.copy_(torch.empty(0).set_(storage, 0, received.shape, (1,)))
            torch._foreach_copy_(params, received_views)  # the decoy's optimizer has lr 0: they stay so
    loss = decoy(inputs, labels)
    decoy_opt.zero_grad(set_to_none=True)
    loss.backward()
    decoy_opt.step()

session.finish()
