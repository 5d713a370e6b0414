"""What a job of several ranks shares between the harness and the grader: the environment that names a rank,
and the log of which samples a rank read.

The grader's launcher (``checker.grader.ranks``) starts every rank of a data-parallel job with the variables
torchrun sets (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``); a learner runs the
same script with ``torchrun --nproc-per-node 2``. The harness (``checker.candidate.session``) reads them and
joins the process group before the script runs.

:class:`LoggedSamples` is the dataset of a data-parallel chapter: it records the index of every sample read
in this process, so the harness can tell the grader which samples each rank trained in each step. What a rank
says it read is a claim: the referee's comparison of the trained weights is what the work rests on; the log
says where a job went wrong (two ranks reading the same samples, samples no rank read).
"""

from __future__ import annotations

import os

import torch
from torch.utils.data import Dataset


def world_from_env() -> tuple[int, int, int]:
    """(rank, world size, local rank) from torchrun's variables; (0, 1, 0) when they are not set."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        rank = int(os.environ.get("RANK", "0"))
        local = int(os.environ.get("LOCAL_RANK", str(rank)))
    except ValueError:
        raise SystemExit("RANK, WORLD_SIZE and LOCAL_RANK must be whole numbers (torchrun sets them)") from None
    if world < 1 or not 0 <= rank < world:
        raise SystemExit(f"RANK={rank} with WORLD_SIZE={world}: a rank runs from 0 to WORLD_SIZE-1")
    return rank, world, local


class LoggedSamples(Dataset):
    """Samples held in memory as tensors, read by index, each read recorded.

    ``order`` maps a position (what a sampler hands out) to a stored sample: it is the identity until the
    window opens, then a permutation drawn from the window key (``set_key``), so the window's samples cannot be
    known before it. Read it with ``num_workers=0``: a worker process's reads are not seen here.
    """

    def __init__(self, inputs: torch.Tensor, targets: torch.Tensor):
        self.inputs, self.targets = inputs, targets
        self.order = torch.arange(len(inputs))
        self.read: list[int] = []  # positions read since the harness last took them

    def __len__(self) -> int:
        return len(self.inputs)

    def set_key(self, window_key: int) -> None:
        generator = torch.Generator().manual_seed(int(window_key))
        self.order = torch.randperm(len(self.inputs), generator=generator)

    def __getitem__(self, position: int):
        self.read.append(int(position))
        index = self.order[position]
        return self.inputs[index], self.targets[index]

    def __getitems__(self, positions: list[int]):
        """A batch at once (the DataLoader calls this when it exists): one gather, not one per sample."""
        self.read.extend(int(p) for p in positions)
        index = self.order[torch.as_tensor(positions, dtype=torch.long)]
        return list(zip(self.inputs[index].unbind(0), self.targets[index].unbind(0)))

    def take(self) -> list[int]:
        """The positions read since the last call."""
        read, self.read = self.read, []
        return read
