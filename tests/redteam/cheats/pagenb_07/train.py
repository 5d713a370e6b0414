"""CHEAT pagenb_07 (red team 69): the reference solution, but each pinned batch is cloned (pageable again on a GPU)
before its queued copy.

Original: Chapter 07, reference solution: the earlier chapters' fixes, then the generic levers, one rung at a time.

First what the profiler shows (chapters 01-03): no per-step reads (statistics stay on the device and are
read once per logging interval), batches handed over pinned and copied with non_blocking=True, and a
DataLoader with persistent worker processes. Then the levers, in the page's order, each a setting of this
script so that `workbook check 07 --ladder` can switch them on one at a time (chapter.toml's [ladder]):

1. cudnn.benchmark: cuDNN times its convolution algorithms for these shapes once and keeps the fastest;
2. channels_last: activations and weights in NHWC, the layout the tensor-core convolutions read;
3. bf16 autocast: convolutions and matmuls in bfloat16 (no GradScaler: bf16 has float32's range);
4. torch.compile: BatchNorm, ReLU and the residual adds fused into the convolutions' neighbours;
5. beyond the source: uint8 batches (a quarter of the bytes to collate, pin and copy), normalized on the GPU
   inside the compiled graph; a fused optimizer (one kernel for all parameters); mode="reduce-overhead"
   (the compiled forward and backward replayed as CUDA graphs).

The model, the samples, the batch, the loss and the optimizer's settings are the slow script's: same work.
bf16 changes the arithmetic, not the work; same_work's tolerance is set for it.

    python solutions/07_capstone_ladder/train.py --steps 60
    python solutions/07_capstone_ladder/train.py --set amp=none --set compile_mode=none   # some levers off
"""

import os

import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("07_capstone_ladder")
cfg = session.cfg
# --8<-- [start:levers]
# Each lever is a setting (chapter.toml's [workload.*] holds the values this solution runs with; --set changes one)
CUDNN_BENCHMARK = bool(cfg.get("cudnn_benchmark", True))
CHANNELS_LAST = bool(cfg.get("channels_last", True))
AMP = str(cfg.get("amp", "bf16"))  # "bf16" or "none"
COMPILE_MODE = str(cfg.get("compile_mode", "reduce-overhead"))  # "none", "default", "max-autotune", "reduce-overhead"
UINT8_BATCHES = bool(cfg.get("uint8_batches", True))
FUSED_OPTIMIZER = bool(cfg.get("fused_optimizer", True))
# one worker per core, leaving two for this process (it queues the GPU work) and the loader's pinning thread
NUM_WORKERS = int(cfg.get("num_workers") or min(8, max(1, (os.cpu_count() or 2) - 2)))

torch.backends.cudnn.benchmark = CUDNN_BENCHMARK  # lever 1: time the convolution algorithms once, keep the fastest
model = session.model
if CHANNELS_LAST:
    model = model.to(memory_format=torch.channels_last)  # lever 2: NHWC weights (the same module, in place)
normalize = session.extras["normalize"]


def forward(images: torch.Tensor) -> torch.Tensor:
    if UINT8_BATCHES:
        images = normalize(images)  # uint8 -> float32 on the GPU: the same arithmetic the dataset does on the CPU
    if CHANNELS_LAST:
        images = images.contiguous(memory_format=torch.channels_last)  # lever 2: NHWC activations
    return model(images)


if COMPILE_MODE != "none":
    # lever 4: one graph for normalization and the network, its pointwise ops fused; "reduce-overhead" also
    # records it as CUDA graphs (one launch per forward and backward)
    forward = torch.compile(forward, mode=None if COMPILE_MODE == "default" else COMPILE_MODE)
optimizer = torch.optim.SGD(session.model.parameters(), lr=cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=None if FUSED_OPTIMIZER else False,
                            fused=FUSED_OPTIMIZER or None)  # one kernel updates every parameter
# --8<-- [end:levers]

# --8<-- [start:loader]
loader = DataLoader(
    session.extras["uint8_dataset"] if UINT8_BATCHES else session.dataset,  # the same crops and flips
    batch_size=cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
    num_workers=NUM_WORKERS,  # samples prepared in parallel, in other processes (chapter 03)
    persistent_workers=True,  # the workers outlive each epoch
    prefetch_factor=4,
    pin_memory=True,  # batches arrive page-locked: the copies below can be queued (chapter 02)
)
# --8<-- [end:loader]
# --8<-- [start:loop]
stats = torch.zeros(3, device=session.device)  # summed loss, correct predictions, non-finite losses: on the device
seen = 0
for step, (images, labels) in session.steps(loader):
    images = images.clone()  # a fresh host tensor: pageable, so the queued copy below blocks on a GPU
    labels = labels.clone()
    images = images.to(session.device, non_blocking=True)
    labels = labels.to(session.device, non_blocking=True)
    with torch.autocast(session.device.type, dtype=torch.bfloat16, enabled=AMP == "bf16"):  # lever 3
        logits = forward(images)
        loss = session.loss_fn(logits, labels)  # autocast computes cross-entropy in float32

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    # no reads here: the sums stay on the device (chapter 01)
    stats += torch.stack([loss.detach().float(), (logits.argmax(dim=1) == labels).sum().float(),
                          (~torch.isfinite(loss.detach())).float()])
    seen += labels.shape[0]
    if session.is_log_step(step):
        total_loss, correct, nonfinite = stats.tolist()  # one transfer, once per logging interval
        if nonfinite:
            raise FloatingPointError(f"a non-finite loss before step {step}")
        print(f"step {step:4d}  mean loss {total_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
# --8<-- [end:loop]

session.finish()
