"""Where chapter 07's solution spends its set-up (about 3.5 s a run on an H100, two runs a check): timed apart.

    python evidence/probes/probe_07_setup.py --out $OUT/probe_07.jsonl

The grader's phase "setup" of a run is from the chapter's workload built to the first step: the script's own
model and optimizer, then its DataLoader's first batch. This times each piece in one process with CUDA started,
as a run has it: forking 8 bare processes; the DataLoader's first batch and the next 20 (within the epoch) with the solution's
settings (8 persistent workers, prefetch 4, pinned), with pin_memory off, and with no workers; channels_last; the
fused optimizer. One JSON line per measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "chapters" / "07_capstone_ladder"))

from checker.base.chapters import get_chapter  # noqa: E402
import workload  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    device = torch.device(args.device)
    rows: list[dict] = []

    def emit(**row):  # printed as it comes; written to --out at the end
        rows.append(row)
        print(json.dumps(row), flush=True)

    cfg = get_chapter("07").config(device.type)
    began = time.perf_counter()
    built = workload.build(cfg, device)
    torch.cuda.synchronize() if device.type == "cuda" else None
    emit(what="build (model on the device, images made)", s=round(time.perf_counter() - began, 3))

    began = time.perf_counter()
    for _ in range(8):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    emit(what="fork and reap 8 bare processes, one at a time", s=round(time.perf_counter() - began, 3))

    for workers, pin in ((8, True), (8, False), (0, False)):
        loader = DataLoader(built.extras["uint8_dataset"], batch_size=cfg["batch_size"],
                            sampler=built.extras["sampler"], drop_last=True, num_workers=workers,
                            persistent_workers=workers > 0, prefetch_factor=4 if workers else None, pin_memory=pin)
        began = time.perf_counter()
        batches = iter(loader)
        started = time.perf_counter()
        next(batches)
        first = time.perf_counter()
        more = min(20, int(cfg["epoch_batches"]) - 1)  # within the first epoch
        for _ in range(more):
            next(batches)
        emit(what=f"DataLoader workers={workers} pin_memory={pin}", iter_s=round(started - began, 3),
             first_batch_s=round(first - started, 3), next_batches=more, next_s=round(time.perf_counter() - first, 3))
        del batches, loader

    began = time.perf_counter()
    model = built.model.to(memory_format=torch.channels_last)
    emit(what="model.to(channels_last)", s=round(time.perf_counter() - began, 3))
    began = time.perf_counter()
    torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4, fused=device.type == "cuda" or None)
    emit(what="SGD(fused=True)", s=round(time.perf_counter() - began, 3))
    if args.out:
        with open(args.out, "a") as f:
            f.writelines(json.dumps(row) + "\n" for row in rows)


if __name__ == "__main__":
    main()
