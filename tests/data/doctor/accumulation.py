"""Gradient accumulation: four micro-batches per optimizer step, from a DataLoader whose dataset does its work in
__getitem__ in the training process (num_workers=0).

Planted problem: the step waits for its batches (data-bound): the DataLoader built with num_workers=0.
"""

import time

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

ACCUMULATE = 4


class SlowImages(Dataset):
    """Every sample is decoded (here: slept for) in __getitem__."""

    def __len__(self):
        return 4096

    def __getitem__(self, index):
        time.sleep(0.008)  # the decode and augmentation a real dataset does per sample
        g = torch.Generator().manual_seed(index)
        return torch.randn(32, generator=g), index % 4


model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
loader = DataLoader(SlowImages(), batch_size=8, num_workers=0)  # PLANTED: one process prepares every sample
for micro, (x, y) in enumerate(loader):
    loss = nn.functional.cross_entropy(model(x), y) / ACCUMULATE
    loss.backward()
    if (micro + 1) % ACCUMULATE == 0:
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
