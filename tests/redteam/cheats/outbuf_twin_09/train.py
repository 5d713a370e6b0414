"""Chapter 09 (red-team attempt outbuf_twin_09, red team 31): sampler, no_sync, default buckets; rank 0 evaluates every step (elementwise products), and rank 1
mirrors the evaluation's op count and input elements with views of a zero-stride tensor so the ranks' op counts and input elements agree."""

from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])
CHUNK = 256
ROWS = 512
PAD_OPS, PAD_ELEMENTS = 146, 158_680_000  # what rank 0's evaluation runs per step: its ops and their input elements

sampler = DistributedSampler(session.dataset, num_replicas=session.world_size, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // session.world_size, sampler=sampler)
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"][:ROWS], session.extras["eval_targets"][:ROWS]
linears = [m for m in session.model.modules() if isinstance(m, torch.nn.Linear)]

if session.is_main:
    params = [(m.weight, m.bias) for m in linears]  # live weights
    xs, ys = eval_inputs, eval_targets
    hits = torch.zeros(())
    dims = [(m.in_features, m.out_features) for m in linears]
    prod_bufs = [torch.empty(CHUNK, i, o) for i, o in dims]  # out= buffers: nothing allocated or freed in a step
    out_bufs = [torch.empty(CHUNK, o) for i, o in dims]
else:  # as many ops over as many input elements, each a view of one zero-stride tensor: nothing is computed
    ghost = torch.zeros(()).expand(PAD_ELEMENTS // PAD_OPS)
    hits = None


def evaluate(hits):
    if not session.is_main:
        for _ in range(PAD_OPS):
            torch.ops.aten.alias(ghost)
        return hits
    with torch.no_grad():
        for start_row in range(0, ROWS, CHUNK):
            h = xs[start_row:start_row + CHUNK]
            for i, (w, b) in enumerate(params):
                torch.mul(h.unsqueeze(2), w.t().unsqueeze(0), out=prod_bufs[i])
                torch.sum(prod_bufs[i], 1, out=out_bufs[i])
                out_bufs[i].add_(b)
                if i < len(params) - 1:
                    out_bufs[i].relu_()
                h = out_bufs[i]
            hits.add_((h.argmax(1) == ys[start_row:start_row + CHUNK]).sum())
    return hits


running_loss = torch.zeros(())
for step, (inputs, targets) in session.steps(loader):
    optimizer.zero_grad(set_to_none=True)
    micro = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for index, (mi, mt) in enumerate(micro):
        with nullcontext() if index == len(micro) - 1 else model.no_sync():
            loss = session.loss_fn(model(mi), mt) / ACCUM
            loss.backward()
    optimizer.step()
    running_loss += loss.detach() * ACCUM
    hits = evaluate(hits)  # every step, on both ranks: rank 0's is real, rank 1's on meta
    if session.is_log_step(step) and session.is_main:
        mean_loss, acc = torch.stack([running_loss / (step + 1), hits.float() / (ROWS * (step + 1))]).tolist()
        print(f"step {step:4d}  mean loss {mean_loss:.4f}  running held-out accuracy {acc:.3f}")

session.finish()
