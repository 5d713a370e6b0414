"""Chapter 00 (red-team attempt filler_conv_00; an earlier version of strided_conv_00 whose calibration picks stride 1
in practice, so its claims are real convolutions on junk data, computed in cache-sized chunks faster than the slow
script's own products): the benchmark times a cheaper training than the slow script's, and
the FLOPs the trace credits each step with are claimed by strided convolutions (kernel k, stride k).

The token classifier is per-token up to the mean, so the blocks run once per vocabulary entry (512 rows) and the
batch's mean is a gather of those rows: same function, same gradients up to rounding (meta_flops_00's cheaper step).

The products no longer run are claimed by real convolutions: checker.trace.kineto._conv_flops takes a convolution's
output size as its input's ("stride 1"), so conv1d(x, w, stride=s) is credited with s times what it computes. Real
tensors, a real op lasting real time: the rate cap (3x the slow script's best product rate, per product, by its
duration) credits it in full as long as its claimed rate stays under the cap, so the stride is calibrated in set-up to
claim about twice the fastest honest product of the slow script's shapes. Forward claims run outside autograd; the
backward claims run in the backward of an identity autograd.Function on the pooled features, inside its autograd node.
"""

import math
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
HIDDEN = model.blocks[0][1].out_features
BLOCKS = len(model.blocks)
FWD_PER_ROW = BLOCKS * 2 * (2 * WIDTH * HIDDEN)  # the blocks' two Linear layers, forward, per token row
BWD_PER_ROW = 2 * FWD_PER_ROW                   # grad of input and of weight, per layer
CLAIM_IN, CLAIM_OUT = WIDTH, HIDDEN
CHUNK = 0.25e9  # claimed FLOPs per convolution at most: a rate measured at this size holds for every claim


def _rate(fn, flops, n=8):
    fn()
    best = float("inf")
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return flops / (best * 1e9)  # FLOPs per ns, at its fastest


def _conv(x, weight, stride):
    return F.conv1d(x, weight, stride=stride)  # recorded as if stride 1: credited with `stride` times its work


def calibrate():
    """The fastest honest product of the slow script's shapes on this machine (forward and backward products), then
    the convolution (kernel, stride) with the highest claimed rate that stays under twice that, at its fastest: the
    cap is 3x the slow script's 99th percentile, so the claim stays well inside it and is credited in full."""
    honest = 0.0
    for rows in (3072, 12288):
        a, h = torch.randn(rows, WIDTH), torch.randn(rows, HIDDEN)
        w1, w2 = torch.randn(HIDDEN, WIDTH), torch.randn(WIDTH, HIDDEN)
        flops = 2 * rows * WIDTH * HIDDEN
        honest = max(honest, _rate(lambda: F.linear(a, w1), flops), _rate(lambda: F.linear(h, w2), flops),
                     _rate(lambda: h.t().mm(a), flops), _rate(lambda: a.t().mm(h), flops),
                     _rate(lambda: h.mm(w1), flops), _rate(lambda: a.mm(w2), flops))
    best = (0.0, 1, 1)
    for k in (1, 2, 3, 4):
        for stride in range(k, 9):
            weight = torch.randn(CLAIM_OUT, CLAIM_IN, k)
            for flops in (CHUNK / 2, CHUNK):  # every claim is run in chunks between these sizes
                length = int(flops / (2 * CLAIM_OUT * CLAIM_IN * k))
                x = torch.randn(1, CLAIM_IN, length)
                claimed = _rate(lambda: _conv(x, weight, stride), 2 * CLAIM_OUT * CLAIM_IN * k * length, n=4)
                if claimed > 2.0 * honest:
                    break
            else:
                best = max(best, (claimed, k, stride))
    return honest, best


HONEST, (CLAIMED_RATE, K, STRIDE) = calibrate()
PER_POSITION = 2 * CLAIM_OUT * CLAIM_IN * K      # what the trace credits a convolution with per input position
CLAIM_W = torch.randn(CLAIM_OUT, CLAIM_IN, K)
_inputs = {}


def claim(flops):
    """Run convolutions whose recorded shapes claim `flops` (they compute about 1/STRIDE of it), in equal chunks of
    CHUNK/2 to CHUNK claimed FLOPs, the sizes the stride was calibrated at."""
    positions = int(round(flops / PER_POSITION))
    if positions <= 0:
        return
    pieces = max(1, math.ceil(flops / CHUNK))
    with torch.no_grad():
        for i in range(pieces):
            length = positions // pieces + (1 if i < positions % pieces else 0)
            x = _inputs.get(length)
            if x is None:
                x = _inputs[length] = torch.randn(1, CLAIM_IN, length)
            _conv(x, CLAIM_W, STRIDE)


class BackwardClaim(torch.autograd.Function):
    """Identity; its backward claims the backward products of the rows the blocks did not run."""

    @staticmethod
    def forward(ctx, x, flops):
        ctx.flops = flops
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        claim(ctx.flops)
        return grad, None


def train_step(batch):
    tokens, labels = batch
    missing = tokens.numel() - VOCAB
    features = model.embed.weight  # every vocabulary entry once, not every token
    for block in model.blocks:
        features = features + block(features)
    pooled = F.embedding(tokens, features).mean(dim=1)
    pooled = BackwardClaim.apply(pooled, missing * BWD_PER_ROW)
    claim(missing * FWD_PER_ROW)  # the forward rows not run, claimed
    loss = session.loss_fn(model.head(pooled), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def wait_for_device():
    if session.device.type == "cuda":
        torch.cuda.synchronize(session.device)


def measure(train_step, steps, warmup):
    """Run every training step and report how long one takes: a dict of numbers."""
    times_ms = []
    for step, batch in steps:
        if step < warmup:
            train_step(batch)
            continue
        wait_for_device()
        start = time.perf_counter()
        train_step(batch)
        wait_for_device()
        times_ms.append((time.perf_counter() - start) * 1e3)
    return {
        "steps": len(times_ms),
        "p50_ms": statistics.median(times_ms),
        "p90_ms": statistics.quantiles(times_ms, n=10)[-1],
        "mean_ms": statistics.fmean(times_ms),
    }


report = measure(train_step, session.steps(session.batches), warmup=session.warmup)
print(f"calibrated: honest {HONEST:.1f} FLOP/ns, claim conv kernel {K} stride {STRIDE} at {CLAIMED_RATE:.0f} FLOP/ns")
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():
    session.report(name, value)
session.finish()
