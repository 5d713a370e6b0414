"""Chapter 08, the reference diagnosis: profile every job of an assignment and write the answer file.

What a learner does by hand, in order: run each job under torch.profiler (the chapter's torch recipe), read
the trace engine's report (the numbers `workbook report` prints), and decide the wall by the page's decision
tree. It writes answer.toml with those numbers and the trace each was read from (kept beside the answer, in
profiles/: the answer shows its work), and names the data-bound job for the fix (the reference solution's
train.py is that fix).

    python solutions/08_triage/diagnose.py --device cpu --out solutions/08_triage/answer.toml
    python solutions/08_triage/diagnose.py --device cuda --out solutions/08_triage/answer.cuda.toml
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))  # this checkout's checker, whatever is installed
DATA_WAIT, GPU_IDLE, HOST_MS_PER_OP = 0.4, 0.4, 0.05  # the page's decision tree, as chapter.toml states it


# Kineto's Python frames, flow arrows and forward/backward links: a diagnosis reads none of them, and a data-bound
# job's Python frames are most of its trace (7 MB of 7.4 MB on an H100). The Python calls inside each fetch of a
# batch are kept: on a CPU the grader counts them to tell a trace of the job from one of a job whose data work was
# replaced (checker/checks/triage.py, shown_problem)
UNREAD = ("python_function", "ac2g", "fwdbwd")


def keep_small(trace: Path, kept: Path) -> None:
    """Copy a torch.profiler trace without the events no diagnosis reads, so the answer's traces stay small."""
    import gzip
    import json

    data = json.loads(gzip.decompress(trace.read_bytes()))
    events = data.get("traceEvents", [])
    fetches = [(e.get("pid"), e["ts"], e["ts"] + e.get("dur", 0)) for e in events
               if e.get("cat") == "user_annotation" and e.get("name") == "data" and "ts" in e]

    def in_a_fetch(e: dict) -> bool:
        return e.get("cat") == "python_function" and "ts" in e and any(
            pid == e.get("pid") and lo <= e["ts"] and e["ts"] + e.get("dur", 0) <= hi for pid, lo, hi in fetches)

    data["traceEvents"] = [e for e in events if e.get("cat") not in UNREAD or in_a_fetch(e)]
    kept.write_bytes(gzip.compress(json.dumps(data, separators=(",", ":")).encode(), compresslevel=9))


def profile(job: str, device: str, folder: Path, keep: Path) -> dict:
    """One job traced as it ships (the slow script), read as `workbook report` reads it; its trace kept in ``keep``."""
    import tomllib

    from checker.trace import load

    cfg = tomllib.loads((ROOT / "chapters/08_triage/chapter.toml").read_text())["workload"][device]
    steps = int(cfg["warmup"]) + int(cfg["trace_steps"])  # as many steps as the grader traces: a small trace
    out = folder / f"job-{job}"
    subprocess.run([sys.executable, "-m", "checker.launch", "--script", str(ROOT / "chapters/08_triage/slow.py"),
                    "--result", f"{out}.result.json", "--trace", "torch", "--trace-out", f"{out}.json.gz", "--",
                    "--device", device, "--job", job, "--steps", str(steps)], check=True, cwd=ROOT, capture_output=True)
    kept = keep / f"{device}-job-{job}.json.gz"
    kept.parent.mkdir(parents=True, exist_ok=True)
    keep_small(Path(f"{out}.json.gz"), kept)
    s = load(kept).summary()
    wait = float(s["data_wait_fraction"] or 0.0)
    row = {"trace": kept.relative_to(keep.parent).as_posix(), "data_wait": round(wait, 3)}
    if device == "cuda":
        row["ops_per_step"] = s["launches_per_step"]
        row["gpu_idle"] = round(float(s["gpu_idle_fraction"] or 0.0), 3)
        row["top_kernel_share"] = round(float(s["top_kernels"][0]["share"]), 3) if s["top_kernels"] else 0.0
        wall = "data" if wait >= DATA_WAIT else "overhead" if row["gpu_idle"] >= GPU_IDLE else "kernel"
    else:
        row["ops_per_step"] = s["top_level_ops_per_step"]
        per_op = s["host_ms_per_op"]  # the report's Ops line: host time per op outside the data wait
        wall = "data" if wait >= DATA_WAIT else "overhead" if per_op <= HOST_MS_PER_OP else "kernel"
    return {"wall": wall, **row}


def machine(device: str) -> str:
    """Where the numbers were measured: the GPU, its driver, torch and the date."""
    import datetime
    import platform

    import torch

    date = datetime.date.today().isoformat()
    if device != "cuda":
        return f"{platform.processor() or platform.machine()} (CPU), torch {torch.__version__}, {date}"
    smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True,
                         text=True).stdout.strip().splitlines()
    driver = f", driver {smi[0]}" if smi else ""
    return f"{torch.cuda.get_device_name(0)}{driver}, torch {torch.__version__}, {date}"


def main() -> int:
    import tomllib

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    jobs = tomllib.loads((ROOT / "labs/08_triage/assignment.toml").read_text())["jobs"]
    with tempfile.TemporaryDirectory() as folder:
        found = {job: profile(job, args.device, Path(folder), args.out.parent / "profiles") for job in jobs}
    fix = next((job for job, row in found.items() if row["wall"] == "data"), next(iter(found)))
    lines = [f"# Written by solutions/08_triage/diagnose.py --device {args.device}: the reference diagnosis of the",
             "# practice assignment (labs/08_triage/assignment.toml).", f"# Measured on {machine(args.device)}.",
             f'device = "{args.device}"', ""]
    for job, row in found.items():
        lines.append(f"[jobs.{job}]")
        lines += [f'wall = "{row["wall"]}"', f'trace = "{row["trace"]}"']
        lines += [f"{k} = {v}" for k, v in row.items() if k not in ("wall", "trace")] + [""]
    lines += ["[fix]", f'job = "{fix}"']
    args.out.write_text("\n".join(lines) + "\n")
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
