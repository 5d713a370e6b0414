"""Three tiny training loops whose host syncs and copies are known by construction.

They are the programs behind the trace engine's fixtures (tests/data/traces/<program>/): the tests
assert exact counts from their traces, and that the Kineto JSON and the nsys SQLite of the same
program agree. Every program runs WARMUP_STEPS unmarked iterations, then --steps marked ones, each
inside an NVTX range *and* a torch.profiler.record_function range named ``step N`` with a nested
``data`` range around making the batch (the same marks the workbook's harness sets).

What each marked step does, on CUDA:

- ``pageable_item``: two blocking ``.to(device)`` copies from pageable memory (each one is a
  cudaMemcpyAsync followed by a cudaStreamSynchronize) and one ``loss.item()`` (a device-to-host
  copy and a cudaStreamSynchronize): 2 pageable HtoD copies and 3 host syncs per step.
- ``pinned_clean``: the batch is pinned and copied with ``non_blocking=True``; the loss is summed on
  the GPU and read once after the last step: 0 pageable copies, 0 host syncs per step.
- ``mask_any``: data made on the GPU; boolean-mask indexing (``aten::nonzero`` must learn the
  result's size) and an ``if t.any():`` branch: 2 host syncs per step, no host-to-device copy.

Run it (CUDA; the nsys capture sees only the marked steps):

    nsys profile -t cuda,nvtx,osrt --capture-range=cudaProfilerApi -o pageable_item \\
        python scripts/trace_fixture_programs.py --program pageable_item --steps 7
    nsys export --type sqlite -o pageable_item.sqlite pageable_item.nsys-rep
    python scripts/trace_fixture_programs.py --program pageable_item --steps 7 \\
        --torch-trace pageable_item.json.gz

``--device cpu`` runs the same loops without CUDA (the CPU fixtures of the tests).
"""

from __future__ import annotations

import argparse
import contextlib
import os

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile, record_function

BATCH = 256          # rows per batch
FEATURES = 512       # input width
HIDDEN = 1024        # hidden width of the two-layer model
CLASSES = 10         # output classes
WARMUP_STEPS = 2     # unmarked iterations before the capture window (allocator, cuBLAS handles)
SEED = 0

try:  # the `nvtx` package when installed, else PyTorch's own binding of the same API
    import nvtx as _nvtx

    def _push(name: str) -> None:
        _nvtx.push_range(name)

    def _pop() -> None:
        _nvtx.pop_range()
except ImportError:  # pragma: no cover - depends on the machine
    def _push(name: str) -> None:
        torch.cuda.nvtx.range_push(name)

    def _pop() -> None:
        torch.cuda.nvtx.range_pop()


@contextlib.contextmanager
def marked(name: str, use_nvtx: bool):
    """One NVTX range (seen by nsys) and one record_function range (seen by torch.profiler)."""
    if use_nvtx:
        _push(name)
    try:
        with record_function(name):
            yield
    finally:
        if use_nvtx:
            _pop()


def build(device: torch.device):
    torch.manual_seed(SEED)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES)
    ).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, foreach=True)
    return model, opt


def train_step(model, opt, x, y):
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss


def pageable_item(model, opt, device, state, use_nvtx):
    with marked("data", use_nvtx):
        x = torch.randn(BATCH, FEATURES)                  # pageable host memory
        y = torch.randint(0, CLASSES, (BATCH,))
    x = x.to(device)      # blocking copy from pageable memory: the host waits for it (sync 1)
    y = y.to(device)      # the same for the labels (sync 2)
    loss = train_step(model, opt, x, y)
    state["loss_sum"] += loss.item()                      # .item() waits for the GPU (sync 3)


def pinned_clean(model, opt, device, state, use_nvtx):
    with marked("data", use_nvtx):
        x = torch.randn(BATCH, FEATURES)
        y = torch.randint(0, CLASSES, (BATCH,))
        if device.type == "cuda":
            x, y = x.pin_memory(), y.pin_memory()         # page-locked: the copy engine reads it directly
    x = x.to(device, non_blocking=True)                   # queued; the host does not wait
    y = y.to(device, non_blocking=True)
    loss = train_step(model, opt, x, y)
    state["loss_sum_t"] = state.get("loss_sum_t", 0) + loss.detach()   # summed on the GPU: no sync


def mask_any(model, opt, device, state, use_nvtx):
    with marked("data", use_nvtx):
        x = torch.randn(BATCH, FEATURES, device=device)
        y = torch.randint(0, CLASSES, (BATCH,), device=device)
    per_sample = F.cross_entropy(model(x), y, reduction="none")
    with torch.no_grad():   # outside autograd, so the backward pass does not index again
        is_hard = per_sample > per_sample.mean()
        hard = per_sample[is_hard]             # mask indexing: nonzero must learn the size (sync 1)
    loss = (per_sample * is_hard).sum() / max(hard.numel(), 1)   # numel is known on the host now
    if torch.isnan(loss).any():                # a Python branch on a GPU value (sync 2)
        return
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


PROGRAMS = {"pageable_item": pageable_item, "pinned_clean": pinned_clean, "mask_any": mask_any}


def run(program: str, steps: int, device: torch.device, torch_trace: str | None) -> None:
    model, opt = build(device)
    body = PROGRAMS[program]
    state = {"loss_sum": 0.0}
    on_cuda = device.type == "cuda"
    for _ in range(WARMUP_STEPS):                         # unmarked, outside the capture window
        body(model, opt, device, state, use_nvtx=False)
    if on_cuda:
        torch.cuda.synchronize()

    prof = None
    if torch_trace:
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_cuda else [])
        prof = profile(activities=activities, with_stack=True)
        prof.__enter__()
    if on_cuda:
        torch.cuda.cudart().cudaProfilerStart()           # nsys --capture-range=cudaProfilerApi starts here
    for step in range(steps):
        with marked(f"step {step}", use_nvtx=on_cuda):
            body(model, opt, device, state, use_nvtx=on_cuda)
    if on_cuda:
        torch.cuda.synchronize()                          # outside every step range
        torch.cuda.cudart().cudaProfilerStop()
    if prof is not None:
        prof.__exit__(None, None, None)
        prof.export_chrome_trace(torch_trace)             # a name ending in .gz is gzipped
    if "loss_sum_t" in state:
        state["loss_sum"] += float(state["loss_sum_t"])  # the one read, after the steps
    print(f"{program}: {steps} marked steps on {device}, loss sum {state['loss_sum']:.4f}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--program", choices=sorted(PROGRAMS), required=True)
    parser.add_argument("--steps", type=int, default=7)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--torch-trace", metavar="OUT.json.gz", help="write a Kineto trace here")
    args = parser.parse_args(argv)
    if args.torch_trace:
        os.makedirs(os.path.dirname(os.path.abspath(args.torch_trace)), exist_ok=True)
    run(args.program, args.steps, torch.device(args.device), args.torch_trace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
