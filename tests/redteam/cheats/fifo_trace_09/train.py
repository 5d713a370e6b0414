"""Chapter 09 red team: the lab's straggler kept (rank 0 reads the loss and evaluates on 8192 samples in EVERY
step), with its evidence rewritten: the harness exports each rank's torch.profiler trace to trace.json.gz beside
this file and sends what it reads back from that path. A named pipe there hands this process the real trace and
the harness another: rank 0's evaluation ops renamed to a non-product, its value reads dropped, and every
all-reduce ranges of rank 0 lengthened by its evaluation's time, so that rank 0 seems to be the one waiting, for a
rank 1 that did no more work: "a late host, not a straggler"."""

import gzip
import json
import os
import threading
from contextlib import nullcontext
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler

from checker.lab import start

HERE = Path(__file__).resolve().parent
OUT = HERE / "trace.json.gz"
READS = {"aten::_local_scalar_dense", "aten::item", "aten::is_nonzero"}


def forge(trace):
    events = trace.get("traceEvents", [])
    blocks = [(e.get("tid"), e["ts"], e["ts"] + e.get("dur", 0)) for e in events
              if e.get("name") == "held_out" and e.get("ph") == "X"]
    longest = max((b - a for _t, a, b in blocks), default=0)
    kept = []
    for e in events:
        name = e.get("name", "")
        if name == "held_out" or name in READS or "tolist" in name:
            continue
        if e.get("ph") == "X" and any(e.get("tid") == t and a <= e.get("ts", -1) <= b for t, a, b in blocks):
            if name.startswith("aten::"):
                e["name"] = "aten::relu"
                e.get("args", {}).pop("Input Dims", None)
        if name.startswith("gloo:all_reduce") and longest:
            e["dur"] = e.get("dur", 0) + 2 * longest
        kept.append(e)
    trace["traceEvents"] = kept
    return trace


def relay():
    with open(OUT, "rb") as pipe:
        real = pipe.read()
    forged = gzip.compress(json.dumps(forge(json.loads(gzip.decompress(real)))).encode())
    with open(OUT, "wb") as pipe:
        pipe.write(forged)


if (HERE / "evt").exists() and not (HERE / "evt").is_file():  # only in the grader's run folder
    os.mkfifo(OUT)
    threading.Thread(target=relay, daemon=True).start()

session = start("09_data_parallel")
cfg = session.cfg
GLOBAL_BATCH = int(cfg["global_batch"])
ACCUM = int(cfg["accum"])

sampler = DistributedSampler(session.dataset, num_replicas=session.world_size, rank=session.rank, shuffle=False)
loader = DataLoader(session.dataset, batch_size=GLOBAL_BATCH // session.world_size, sampler=sampler,
                    pin_memory=session.device.type == "cuda")
model = DistributedDataParallel(session.model)
optimizer = torch.optim.SGD(model.parameters(), lr=cfg["lr"], momentum=0.9)
eval_inputs, eval_targets = session.extras["eval_inputs"], session.extras["eval_targets"]

losses = []
for step, (inputs, targets) in session.steps(loader):
    inputs = inputs.to(session.device, non_blocking=True)
    targets = targets.to(session.device, non_blocking=True)
    optimizer.zero_grad(set_to_none=True)
    micro_batches = list(zip(inputs.chunk(ACCUM), targets.chunk(ACCUM)))
    for index, (micro_inputs, micro_targets) in enumerate(micro_batches):
        with nullcontext() if index == len(micro_batches) - 1 else model.no_sync():
            loss = session.loss_fn(model(micro_inputs), micro_targets) / ACCUM
            loss.backward()
    optimizer.step()

    if session.is_main:  # the lab's straggler: a read and an evaluation every step, on rank 0 alone
        with torch.profiler.record_function("held_out"):
            losses.append(loss.item() * ACCUM)
            with torch.no_grad():
                accuracy = (session.model(eval_inputs).argmax(dim=1) == eval_targets).float().mean().item()
        if session.is_log_step(step):
            print(f"step {step:4d}  loss {losses[-1]:.4f}  held-out accuracy {accuracy:.3f}")

session.finish()
