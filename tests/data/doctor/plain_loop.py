"""A plain training loop, as people write it: argparse, a DataLoader, a main() guarded by __name__, sys.exit.

Planted problem (workbook doctor must name it, with its line): `loss.item()` every step, a host sync.
"""

import argparse
import sys

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(640, 64), torch.randint(0, 10, (640,)))
    loader = DataLoader(data, batch_size=args.batch_size, shuffle=True)
    model = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    total = 0.0
    for epoch in range(args.epochs):
        for inputs, labels in loader:
            loss = nn.functional.cross_entropy(model(inputs), labels)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()  # PLANTED: a host sync every step
        print(f"epoch {epoch}: mean loss {total / len(loader):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
