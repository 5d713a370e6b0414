"""A custom loop with no DataLoader: batches come from a generator of tensors; the model is written one small op
at a time (a hand-rolled residual MLP with its own norm), so every step is hundreds of tiny ops.

Planted problem: launch-bound: many tiny ops per step, most of them from `TinyBlock.forward`.
"""

import torch
from torch import nn


class TinyBlock(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(width, width) / width ** 0.5)
        self.scale = nn.Parameter(torch.ones(width))
        self.shift = nn.Parameter(torch.zeros(width))

    def forward(self, x):
        h = x @ self.weight
        mean = h.mean(-1, keepdim=True)
        var = ((h - mean) ** 2).mean(-1, keepdim=True)
        h = (h - mean) / torch.sqrt(var + 1e-5) * self.scale + self.shift  # PLANTED: one small op at a time
        return x + torch.tanh(h) * 0.5


def batches(n, width):
    g = torch.Generator().manual_seed(0)
    for _ in range(n):
        yield torch.randn(8, width, generator=g), torch.randn(8, width, generator=g)


model = nn.Sequential(*[TinyBlock(16) for _ in range(24)])
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
for x, y in batches(40, 16):
    loss = ((model(x) - y) ** 2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
