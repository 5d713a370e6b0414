"""Fingerprints of what a chapter's workload builds for one seed: its data, its initial weights, and the held-out
loss of those initial weights, each as the harness and the referee build them.

    python scripts/workload_fingerprint.py 05 [--device cuda] [--seed 12345]

Prints one JSON object. Two machines (or two lanes of one host) that print different ``data`` or ``init`` for the
same chapter, device and seed built different workloads from the same secret: the runs they check are not the same
experiment. Written for chapter 05's held-out loss, which ended out of line only in lanes of a multi-GPU host
(evidence/history/README.md, sessions 37 and 38); ``scripts/gpu_verify.sh`` records it in env.json for the
chapters a plan names in FINGERPRINT.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from checker.base.chapters import get_chapter  # noqa: E402
from checker.base.workloads import load_workload_module  # noqa: E402


def digest(tensors) -> str:
    h = hashlib.sha256()
    for tensor in tensors:
        h.update(tensor.detach().to("cpu").contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def fingerprint(chapter_id: str, device: str, seed: int) -> dict:
    chapter = get_chapter(chapter_id)
    cfg = dict(chapter.config(device), seed=seed)
    torch.manual_seed(seed)  # as the referee does before it builds
    workload = load_workload_module(chapter.dir).build(cfg, torch.device(device))
    batches = list(getattr(workload.batches, "batches", None) or [])
    data = [t for batch in batches for t in (batch if isinstance(batch, (tuple, list)) else [batch])
            if isinstance(t, torch.Tensor)]
    state = [v for _, v in sorted(workload.model.state_dict().items())]
    with torch.no_grad():
        loss = float(workload.eval_loss(workload.model.eval()))
    return {"chapter": chapter.id, "device": device, "seed": seed, "data": digest(data) if data else None,
            "init": digest(state), "eval_loss_init": loss, "torch_threads": torch.get_num_threads(),
            "cpus": len(os.sched_getaffinity(0))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapter")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--seed", type=int, default=12345)
    args = parser.parse_args()
    print(json.dumps(fingerprint(args.chapter, args.device, args.seed)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
