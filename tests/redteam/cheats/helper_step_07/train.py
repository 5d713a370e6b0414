"""Chapter 07 (attempt): the lab's whole step as it ships - samples cropped/flipped/normalized one by one in the
training loop's process, a blocking copy, .item() and float() reads every step, `if tensor`, SGD foreach=False -
runs in a helper process on shared-memory weights. The traced process holds a DataLoader of keys with one
persistent worker (loader_settings), hands each batch of keys to the helper, and runs a decoy."""

import time

import torch
import torch.multiprocessing as tmp
from torch.utils.data import DataLoader, Dataset

from checker.lab import start

CHAPTER = "07_capstone_ladder"
_h = {}


def helper_init(tensors, cfg, threads):
    from checker.base.chapters import get_chapter
    from checker.base.workloads import load_workload_module

    workload = load_workload_module(get_chapter(CHAPTER).dir).build(cfg, torch.device("cpu"))
    torch.set_num_threads(threads)
    model = workload.model
    for mine, shared in zip(model.state_dict(keep_vars=True).values(), tensors):
        mine.data = shared
    _h.update(model=model, dataset=workload.dataset, loss_fn=workload.loss_fn, running_loss=0.0, correct=0, seen=0,
              optimizer=torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4,
                                        foreach=False))


def helper_step(index, salt):
    """The lab's step: its own sample preparation and its reads."""
    made = [_h["dataset"][(i, s)] for i, s in zip(index.tolist(), salt.tolist())]
    images = torch.stack([m[0] for m in made])
    labels = torch.tensor([m[1] for m in made])
    model, optimizer = _h["model"], _h["optimizer"]
    logits = model(images)
    loss = _h["loss_fn"](logits, labels)
    _h["running_loss"] += loss.item()
    if not torch.isfinite(loss):
        raise FloatingPointError(f"loss is {loss}")
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    _h["correct"] += float((logits.argmax(dim=1) == labels).sum())
    _h["seen"] += labels.shape[0]


class Keys(Dataset):
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, item):
        return item


def main():
    session = start(CHAPTER)
    model = session.model
    model.share_memory()
    tensors = list(model.state_dict(keep_vars=True).values())
    pool = tmp.get_context("spawn").Pool(1, initializer=helper_init,
                                         initargs=(tensors, dict(session.cfg), torch.get_num_threads()))
    loader = DataLoader(Keys(len(session.dataset)), batch_size=session.cfg["batch_size"],
                        sampler=session.extras["sampler"], drop_last=True, num_workers=1, persistent_workers=True, pin_memory=True)
    big_a, big_b = torch.randn(16384, 256), torch.randn(256, 1024)
    w = torch.ones(1, requires_grad=True)
    ns_per_row = 2000.0
    for step, (index, salt) in session.steps(loader):
        t0 = time.perf_counter_ns()
        pool.apply(helper_step, (index, salt))
        helper_ns = time.perf_counter_ns() - t0
        rows = int(min(16384, max(8, helper_ns / ns_per_row)))
        t1 = time.perf_counter_ns()
        (torch.mm(big_a[:rows], big_b) * w).sum().backward()
        ns_per_row = 0.5 * ns_per_row + 0.5 * (time.perf_counter_ns() - t1) / rows
    session.finish()
    pool.terminate()


if __name__ == "__main__":
    main()
