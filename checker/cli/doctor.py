"""`workbook doctor`: the workbook's rules on the learner's own training script.

    workbook doctor [--steps N] [--warmup W] [--step-at optimizer|backward] [--tool torch|nsys] [--device cuda|cpu]
                    [--json] [--timeline PNG] [--out DIR] -- python train.py ARGS...

run.py starts the job under the launcher (launch.py, in the job's process) and reads back its record and trace;
diagnose.py applies chapter 08's decision tree and every chapter's analysis; this module prints the result.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

from checker.base.errors import WorkbookError


def add_doctor_parser(sub) -> argparse.ArgumentParser:
    p = sub.add_parser("doctor", help="the workbook's rules on your own training script: which wall, which line, "
                       "which chapter", description="Runs your training script unmodified, records a few steps "
                       "(a step ends at each optimizer.step()), and prints a ranked diagnosis. "
                       "Example: workbook doctor -- python train.py --epochs 1")
    p.add_argument("--steps", type=int, default=5, metavar="N", help="steps to record after the warm-up (default 5)")
    p.add_argument("--warmup", type=int, default=3, metavar="W", help="steps to run before recording (default 3; "
                   "more with torch.compile)")
    p.add_argument("--step-at", choices=("optimizer", "backward"), default="optimizer",
                   help="where a step ends: each optimizer.step() (default), or each backward() for a script that "
                   "updates its weights by hand")
    p.add_argument("--tool", choices=("torch", "nsys"), default="torch",
                   help="record with torch.profiler (default: lines of your script) or Nsight Systems (GPU only)")
    p.add_argument("--device", choices=("cuda", "cpu"),
                   help="cuda: record the GPU too; cpu: hide the GPUs from the job (default: cuda when torch sees one)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--timeline", type=Path, metavar="PNG", help="also draw the recorded steps' timeline (PNG or SVG)")
    p.add_argument("--out", type=Path, metavar="DIR",
                   help="keep the trace and the launcher's record in DIR (default: a temporary folder, removed)")
    p.add_argument("--timeout", type=float, default=1800, metavar="S",
                   help="stop the job after S seconds if it has not reached the steps (default 1800)")
    p.add_argument("command", nargs=argparse.REMAINDER,
                   help="-- then the job: python train.py ARGS, python -m pkg ARGS, torchrun --nproc-per-node N train.py ARGS")
    return p


def cmd_doctor(args: argparse.Namespace) -> int:
    from checker.doctor.run import parse_target, record_job, refusal

    if args.steps < 1 or args.warmup < 0:
        raise WorkbookError("--steps must be 1 or more and --warmup 0 or more")
    target = parse_target(list(args.command))
    device = args.device or _default_device()
    if device == "cuda" and not _has_cuda():
        raise WorkbookError("--device cuda: torch sees no CUDA GPU on this machine; use --device cpu")
    if args.tool == "nsys" and device != "cuda":
        raise WorkbookError("--tool nsys records CUDA work and NVTX ranges: on a CPU use --tool torch")
    if args.timeline and args.timeline.suffix.lower() not in (".png", ".svg"):
        raise WorkbookError(f"--timeline {args.timeline}: give a .png or .svg file name")
    out = args.out or Path(tempfile.mkdtemp(prefix="workbook-doctor-"))
    try:
        recorded = record_job(target, out, warmup=args.warmup, steps=args.steps, device=device, tool=args.tool,
                              timeout_s=args.timeout, step_at=args.step_at)
        why = refusal(recorded.record, target)
        if why:
            raise WorkbookError(why)
        if recorded.trace is None:
            raise WorkbookError(f"{target.shown}: the recorded steps left no trace in {out}")
        diagnosis = analyse(recorded.trace, recorded.record, device, recorded.rank_traces)
        diagnosis["job"] = target.shown
        if args.timeline:
            from checker.trace import load

            load(recorded.trace, step_regex=recorded.record["step_pattern"]).timeline(args.timeline)
        print(json.dumps(diagnosis, indent=1, default=str) if args.json else render(diagnosis))
        return 0
    finally:
        if args.out is None:
            shutil.rmtree(out, ignore_errors=True)


def analyse(trace_path: Path, record: dict, device: str, rank_traces: list[Path] = ()) -> dict:
    """The diagnosis of rank 0's (or the one process's) recorded steps; a torchrun job's ranks side by side."""
    from checker.doctor.diagnose import add_ranks, diagnose
    from checker.trace import TraceError, load

    try:
        trace = load(trace_path, step_regex=record["step_pattern"])
        others = [load(path, step_regex=record["step_pattern"]) for path in rank_traces[1:]]
    except TraceError as err:
        raise WorkbookError(f"the recorded trace cannot be read: {err}") from None
    if not trace.has_steps:
        raise WorkbookError("the recorded trace holds no step ranges: the profiler did not see the steps")
    diagnosis = diagnose(trace, record, device)
    if others:
        add_ranks(diagnosis, [trace, *others])
    return diagnosis


def render(d: dict) -> str:
    """The text a person reads: the wall and the numbers that decided it, then the findings, most costly first."""
    lines = [f"workbook doctor: {d['job']}",
             f"  {d['steps']} steps recorded after {d['warmup']} warm-up steps on {d['device']}, median step "
             f"{d['step_ms_median']:.2f} ms"]
    ref = d["decided_by"]
    lines.append(f"Wall (chapter {ref['number']}'s decision tree): {d['wall_name']}: {d['rule']}")
    if not d["findings"]:
        lines.append("No wall found from any chapter: nothing in these steps costs a measurable share.")
    for i, f in enumerate(d["findings"], 1):
        ch = f["chapter"]
        lines.append(f"{i}. {f['title']}  [chapter {ch['number']}: {ch['title']}]")
        lines.append("   numbers: " + ", ".join(f"{k} {_fmt(v)}" for k, v in f["numbers"].items() if v is not None)
                     + f" ({f['basis']})")
        for where in f["lines"][:5]:
            lines.append(f"   {'at' if '.py:' in where else 'in'} {where}")
        lines.append(f"   fix: {f['fix']}")
    for f in d["also_seen"]:
        lines.append(f"also seen (under 2% of the step): {f['title']} [chapter {f['chapter']['number']}]")
    if d.get("ranks"):
        from checker.trace.ranks import render_ranks

        lines.append(render_ranks(d["ranks"]))
    lines += [f"Note: {n}" for n in d["notes"]]
    lines += [f"Warning: {w}" for w in d["warnings"]]
    return "\n".join(lines)


def _fmt(value) -> str:
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def _default_device() -> str:
    return "cuda" if _has_cuda() else "cpu"


if __name__ == "__main__":  # pragma: no cover - `workbook doctor` is the way in
    sys.exit("use `workbook doctor -- python train.py ARGS`")
