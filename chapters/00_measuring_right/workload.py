"""Chapter 00's workload: a token classifier fed batches of two lengths, as a length-bucketing loader makes them.

Most batches hold short sequences; every ``long_every``-th batch holds long ones and costs several times as
much. The series of step times is therefore jittery by construction: its median, its 90th percentile and its
mean are three different numbers, and a benchmark that reports one of them as "the step time" says something
different from one that reports another. Nothing here waits for the device; the batches are made before the
first step and live on it.

The first training steps pay one-time costs on a GPU (memory pools growing, cuBLAS set up, kernels chosen); on a
CPU almost none, so a benchmark that counts its warm-up steps there would report what the timed steps cost. Where
the settings ask (``cold_steps``, ``cold_len``: the CPU's), each of the harness's first ``cold_steps`` steps is handed
a batch of ``cold_len`` tokens, twice a long batch: real work that costs its step what a GPU's first steps pay, so
that counting the warm-up shows on a CPU too. Session 72-73's stand-in, a wait in the model's forward pass, was
skipped by a forward pass written out by hand and by a script that set the model's count of cold steps to 0 (red team
57's manualfwd2_00, coldoff_00); a batch's tokens are trained whatever calls the model's layers, and the model holds
no setting.
"""

from __future__ import annotations

import random
import sys

import torch
from torch import nn
from torch.nn import functional as F

from checker.base.workloads import Workload


class TokenClassifier(nn.Module):
    """Embedding, residual MLP blocks applied to every token, mean over the sequence, a linear head."""

    def __init__(self, vocab: int, width: int, hidden: int, blocks: int, classes: int):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, hidden), nn.GELU(), nn.Linear(hidden, width))
            for _ in range(blocks))
        self.head = nn.Linear(width, classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for block in self.blocks:
            x = x + block(x)
        return self.head(x.mean(dim=1))


def _harness_step() -> int | None:
    """The step the harness's session.steps() is at in this process, or None before its first (or with no harness)."""
    session = sys.modules.get("checker.candidate.session")  # loaded wherever a harness runs steps; never imported here
    return None if session is None else session._WINDOW_STEP[0]


def make_batch(batch_size: int, length: int, vocab: int, classes: int, generator: torch.Generator):
    """Each class draws most of its tokens from its own band of the vocabulary: learnable from the mean."""
    labels = torch.randint(0, classes, (batch_size,), generator=generator)
    band = vocab // classes
    own = labels[:, None] * band + torch.randint(0, band, (batch_size, length), generator=generator)
    noise = torch.randint(0, vocab, (batch_size, length), generator=generator)
    tokens = torch.where(torch.rand(batch_size, length, generator=generator) < 0.6, own, noise)
    return tokens, labels


class BucketedBatches:
    """A re-iterable of ``epoch_batches`` batches: short ones, and a long one every ``long_every``-th step.

    The pattern of lengths is fixed by the position of the batch; which batch of that length comes is drawn
    from the window key once the timed window opens (see checker.base.workloads), so no one can know the window's
    batches before it starts.
    """

    def __init__(self, short: list, long: list, long_every: int, epoch_batches: int, cold: list | None = None,
                 cold_steps: int = 0):
        self.short, self.long, self.long_every, self.epoch_batches = short, long, long_every, epoch_batches
        # the harness's first steps' batches, where the settings ask (names the scan refuses a script to reach)
        self._cold_pool, self._cold_steps = cold, cold_steps
        self.position = 0
        self.generator: random.Random | None = None

    def set_key(self, window_key: int) -> None:
        self.generator = random.Random(int(window_key))

    def __iter__(self):
        for _ in range(self.epoch_batches):
            pool = self.long if self.position % self.long_every == self.long_every - 1 else self.short
            step = _harness_step() if self._cold_pool else None
            if step is not None and step < self._cold_steps:  # a warm-up step of the harness's: its first steps' cost
                pool = self._cold_pool
            if self.generator is None:
                index = self.position % len(pool)
            else:  # drawn in Python: the grader's data code reads no tensor's value
                index = self.generator.randrange(len(pool))
            self.position += 1
            yield pool[index]


def build(cfg: dict, device: torch.device) -> Workload:
    seed = int(cfg.get("seed", 0))
    generator = torch.Generator().manual_seed(seed)
    vocab, classes, batch_size = int(cfg["vocab"]), int(cfg["classes"]), int(cfg["batch_size"])
    pool = int(cfg.get("pool", 8))

    def batches(length: int) -> list:
        return [tuple(t.to(device) for t in make_batch(batch_size, length, vocab, classes, generator))
                for _ in range(pool)]

    cold_steps = int(cfg.get("cold_steps", 0))
    source = BucketedBatches(batches(int(cfg["short_len"])), batches(int(cfg["long_len"])),
                             int(cfg["long_every"]), int(cfg.get("epoch_batches", 64)),
                             batches(int(cfg["cold_len"])) if cold_steps else None, cold_steps)
    eval_tokens, eval_labels = (t.to(device) for t in make_batch(int(cfg.get("eval_size", 256)), int(cfg["short_len"]),
                                                                 vocab, classes, generator))
    model = TokenClassifier(vocab, int(cfg["width"]), int(cfg["hidden"]), int(cfg["blocks"]), classes).to(device)

    def eval_loss(trained: nn.Module) -> float:
        with torch.no_grad():
            return float(F.cross_entropy(trained(eval_tokens), eval_labels))

    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, batches=source,
                    on_window=source.set_key)
