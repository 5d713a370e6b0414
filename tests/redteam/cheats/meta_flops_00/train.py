"""Chapter 00 (red-team attempt meta_flops_00): the benchmark times a cheaper training than the slow script's, and the
trace's count of each step's matrix products is made up on the meta device.

The model is per-token up to the mean over the sequence: embedding, residual MLP blocks on each token, then a mean.
So every token's features depend on its id alone, and the MLP can run once per vocabulary entry (512 rows) instead of
once per token (3,072 rows in a short batch, 12,288 in a long one); the batch's mean is then a gather of those rows.
Same function, same gradients up to float rounding, so the weights land where the slow script's do.

step_work counts each step's matrix-product FLOPs from the shapes torch.profiler records, forward and backward apart,
against the slow script's same step. The rows the MLP no longer runs are run again as a copy of the blocks on the meta
device: tensors with shapes and no data, whose ops the profiler records with their shapes (a CPU trace names no
device) and which cost only the dispatcher's time. The counted FLOPs are then exactly the slow script's in every step,
and the backward nodes and gradient stores of the meta copy add to the ones same_work counts.

The report is measured honestly (the solution's measure(), unchanged): of steps that do a fraction of the training.

    python train.py --steps 60
"""

import copy
import statistics
import time

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
VOCAB = model.embed.num_embeddings
WIDTH = model.embed.embedding_dim
shadow_blocks = copy.deepcopy(model.blocks).to("meta")  # the blocks' shapes, no data
shadow_params = list(shadow_blocks.parameters())
# each block's two Linear layers: only the products are counted, so only they are replayed (LayerNorm and GELU on the
# meta device run Python meta kernels, several times the dispatcher's cost)
shadow_linears = [(block[1].weight, block[1].bias, block[3].weight, block[3].bias) for block in shadow_blocks]


def shadow_rows(rows):
    """The products of `rows` tokens through the blocks, forward and backward, on the meta device: recorded, not run."""
    if rows <= 0:
        return
    x = torch.empty(rows, WIDTH, device="meta", requires_grad=True)
    for w1, b1, w2, b2 in shadow_linears:
        x = F.linear(F.linear(x, w1, b1), w2, b2)
    x.sum().backward()
    for p in shadow_params:
        p.grad = None


def train_step(batch):
    tokens, labels = batch
    features = model.embed.weight  # every vocabulary entry once, not every token
    for block in model.blocks:
        features = features + block(features)
    pooled = F.embedding(tokens, features).mean(dim=1)  # each token's row, then the mean over the sequence
    loss = session.loss_fn(model.head(pooled), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    shadow_rows(tokens.numel() - VOCAB)  # the tokens' rows the blocks did not run, counted as if they had


def wait_for_device():
    """Return once the device has run everything queued so far (a no-op on a CPU: its ops finish before returning)."""
    if session.device.type == "cuda":
        torch.cuda.synchronize(session.device)


# --8<-- [start:measure]
def measure(train_step, steps, warmup):
    """Run every training step and report how long one takes: a dict of numbers."""
    times_ms = []
    for step, batch in steps:
        if step < warmup:  # one-time costs: run these steps, do not time them
            train_step(batch)
            continue
        wait_for_device()  # start from an idle device, so that this step's time is this step's alone
        start = time.perf_counter()
        train_step(batch)
        wait_for_device()  # the clock stops when the GPU has finished the step, not when it was queued
        times_ms.append((time.perf_counter() - start) * 1e3)
    return {
        "steps": len(times_ms),
        "p50_ms": statistics.median(times_ms),  # the typical step
        "p90_ms": statistics.quantiles(times_ms, n=10)[-1],  # the slow tail: the long batches
        "mean_ms": statistics.fmean(times_ms),  # what throughput pays: total time / steps
    }
# --8<-- [end:measure]


report = measure(train_step, session.steps(session.batches), warmup=session.warmup)
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():  # to the grader, which holds each number against its own clock
    session.report(name, value)
session.finish()
