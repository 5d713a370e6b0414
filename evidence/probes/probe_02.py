"""Chapter 02's pieces timed apart on the GPU machine: what bounds the step, the loader, the copy or the model?

    python evidence/probes/probe_02.py --out $OUT/probe_02.jsonl

Prints one JSON line per measurement: DataLoader batches/s (per-sample collating or ready batches; workers;
pin_memory), host-to-device GB/s from pageable and pinned memory, and the model's train-step time per
downscale. Used to size the workload (see the comment in chapters/02_pageable_copies/chapter.toml).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "chapters" / "02_pageable_copies"))
import workload


def emit(out, **row):
    line = json.dumps(row)
    print(line, flush=True)
    if out:
        with open(out, "a") as f:
            f.write(line + "\n")


class PerSample(torch.utils.data.Dataset):
    """One image per item, collated by the DataLoader: the design chapter 02 had before this probe."""

    def __init__(self, images, labels, length):
        self.images, self.labels, self.length = images, labels, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        slot = (i * 7919) % len(self.images)
        return self.images[slot], int(self.labels[slot])


def loader_rate(loader, batches=24):
    """Batches per second the loader delivers, after 4 to start its workers and fill its queue."""
    it = iter(loader)
    for _ in range(4):
        next(it)
    t = time.perf_counter()
    for _ in range(batches):
        next(it)
    return batches / (time.perf_counter() - t)


class BatchViews(torch.utils.data.Dataset):
    """Whole batches as contiguous views of a pool in shared memory: what a worker sends is a handle, not a copy."""

    def __init__(self, images, labels, batch_size, length):
        self.images, self.labels, self.bs, self.length = images.share_memory_(), labels.share_memory_(), batch_size, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        start = (i * 7 * self.bs) % (len(self.images) - self.bs + 1)
        return self.images[start:start + self.bs], self.labels[start:start + self.bs]


def copy_gbps(src, reps=10):
    dst = torch.empty(src.shape, device="cuda")
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t)
    return src.numel() * src.element_size() / statistics.median(times) / 1e9


def step_ms(arch, downscale, batch_size, size, reps=20):
    torch.backends.cudnn.benchmark = True
    model = workload.make_model(arch, downscale).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(batch_size, 3, size, size, device="cuda")
    y = torch.randint(0, 10, (batch_size,), device="cuda")
    for i in range(reps + 5):
        if i == 5:
            torch.cuda.synchronize()
            t = time.perf_counter()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    torch.cuda.synchronize()
    return (time.perf_counter() - t) / reps * 1e3


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path)
    p.add_argument("--batch-size", type=int, default=256)
    a = p.parse_args()
    size, bs = 224, a.batch_size
    gen = torch.Generator().manual_seed(0)
    templates = torch.randn(10, 3, 4, 4, generator=gen)
    images, labels = workload.make_images(512, size, templates, gen)
    dataset = PerSample(images, labels, length=bs * 40)
    batch = images[:bs].contiguous()
    emit(a.out, what="copy", source="pageable", mb=round(batch.numel() * 4 / 1e6, 1), gb_per_s=round(copy_gbps(batch), 2))
    emit(a.out, what="copy", source="pinned", mb=round(batch.numel() * 4 / 1e6, 1), gb_per_s=round(copy_gbps(batch.pin_memory()), 2))
    t = time.perf_counter()
    for _ in range(5):
        batch.pin_memory()
    emit(a.out, what="pin_memory_call", ms=round((time.perf_counter() - t) / 5 * 1e3, 2))
    for workers, pin in [(0, False), (8, False), (8, True), (12, False), (12, True)]:
        emit(a.out, what="loader", workers=workers, pin_memory=pin, batch_size=bs,
             batches_per_s=round(loader_rate(DataLoader(dataset, batch_size=bs, num_workers=workers, pin_memory=pin)), 2))
    views = BatchViews(images.clone(), labels.clone(), bs, 40)
    for workers, pin in [(0, False), (0, True), (4, False), (4, True)]:
        emit(a.out, what="view_loader", workers=workers, pin_memory=pin, batch_size=bs,
             batches_per_s=round(loader_rate(DataLoader(views, batch_size=None, num_workers=workers, pin_memory=pin)), 2))
    for downscale in (2, 3, 4, 6):
        emit(a.out, what="model_step", arch="resnet18", downscale=downscale, batch_size=bs,
             ms=round(step_ms("resnet18", downscale, bs, size), 2))


if __name__ == "__main__":
    main()
