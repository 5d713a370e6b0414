"""Chapter 07 lab, the capstone: profile a real model, fix what the profiler shows, then climb the ladder.

Right now this loop is the slow baseline: a ResNet-18 on CIFAR-sized images with the patterns of chapters
01-03 (per-step reads, pageable blocking copies, a loader without workers) and none of the generic levers.
Profile it first (`workbook profile 07 --tool torch`, then nsys, then ncu on the top kernel), fix what the
trace shows, then add the levers one at a time and measure each: cudnn.benchmark, channels_last, bf16
autocast, torch.compile, and at least one of your own. Keep the model, the samples, the batch size and the
optimizer's settings: the checker compares the same work.

    python labs/07_capstone_ladder/train.py --steps 60     # trains and prints samples/s
    workbook check 07                                      # measures your fix against the baseline
    workbook check 07 --variant solution --ladder          # the reference solution's ladder, rung by rung (GPU)

Only this file is yours to edit. The model, the data and the loss come from chapters/07_capstone_ladder/.
"""

import gzip
import json
import os
import subprocess
import threading
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from checker.lab import start

# Red team: the lab's loop as it ships (no workers, every sample prepared in this process, reads every step), with
# three pieces of evidence made up:
# - the trace: a named pipe at the path the harness exports its trace to, so this process reads the real trace and
#   the harness reads back (and sends) one without the reads and the sample preparation;
# - the worker processes the grader counts: one idle child, alive from before the first step to the end;
# - the loader settings: the outcome line the launcher sends after the script is sent by the script first, with
#   made-up settings, and the process ends before the launcher can send its own.
HERE = Path(__file__).resolve().parent
EVT, OUT = HERE / "evt", HERE / "trace.json.gz"
GRADED = EVT.exists() and not EVT.is_file()
DROP = {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero", "aten::constant_pad_nd", "aten::flip"}


def relay():
    with open(OUT, "rb") as pipe:
        trace = json.loads(gzip.decompress(pipe.read()))
    trace["traceEvents"] = [e for e in trace.get("traceEvents", []) if e.get("name") not in DROP]
    with open(OUT, "wb") as pipe:
        pipe.write(gzip.compress(json.dumps(trace).encode()))


if GRADED:
    os.mkfifo(OUT)
    threading.Thread(target=relay, daemon=True).start()
    idle = subprocess.Popen(["sleep", "3600"])  # a "worker" for the grader's process count

session = start("07_capstone_ladder")
# TODO: torch.backends.cudnn.benchmark, channels_last for the model (and the batch), torch.compile
model = session.model
optimizer = torch.optim.SGD(model.parameters(), lr=session.cfg["lr"], momentum=0.9, weight_decay=5e-4,
                            foreach=False)  # TODO: one parameter at a time; fused=True updates them all at once

# TODO: worker processes that outlive an epoch, pinned batches (chapters 02 and 03);
# session.extras["uint8_dataset"] gives the same samples as uint8, for session.extras["normalize"] on the GPU
loader = DataLoader(
    session.dataset,  # float32 samples, normalized on the CPU
    batch_size=session.cfg["batch_size"],
    sampler=session.extras["sampler"],  # shuffles every epoch, the same order in every variant
    drop_last=True,
)
running_loss = 0.0
correct = 0
seen = 0
# --8<-- [start:loop]
for step, (images, labels) in session.steps(loader):
    images = images.to(session.device)  # TODO: a blocking copy from pageable memory (chapter 02)
    labels = labels.to(session.device)
    logits = model(images)  # TODO: bf16 autocast around the forward pass and the loss
    loss = session.loss_fn(logits, labels)
    running_loss += loss.item()  # TODO: a read every step (chapter 01)
    if not torch.isfinite(loss):  # TODO: `if tensor` reads it too
        raise FloatingPointError(f"loss is {loss} at step {step}")

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()

    correct += float((logits.argmax(dim=1) == labels).sum())  # TODO: and another
    seen += labels.shape[0]
    if session.is_log_step(step):
        print(f"step {step:4d}  mean loss {running_loss / (step + 1):.4f}  accuracy {correct / seen:.3f}")
# --8<-- [end:loop]

session.finish()
if GRADED:
    window_samples = (session.total_steps - session.warmup) * session.cfg["batch_size"]
    settings = {"num_workers": 1, "pin_memory": True, "persistent_workers": True, "prefetch_factor": 2,
                "batch_size": session.cfg["batch_size"], "class": "torch.utils.data.dataloader.DataLoader",
                "redefined": []}
    fd = os.open(EVT, os.O_WRONLY)
    os.write(fd, (json.dumps({"type": "done", "samples": window_samples, "loader": settings, "trace_file": None,
                              "device_name": "CPU"}) + "\n").encode())
    idle.kill()
    os._exit(0)  # the launcher's own outcome line is never sent
