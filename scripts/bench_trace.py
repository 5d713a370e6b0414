"""Benchmark checker.trace against HolisticTraceAnalysis (HTA) on the same Kineto traces.

What it measures, per trace and per engine, each in a fresh subprocess: wall time and peak resident memory
of parse + steps + GPU idle analysis. The peak is the process's own high-water mark (VmHWM in
/proc/self/status): ``ru_maxrss`` of a child started by subprocess also counts the parent's memory at the
fork, which inflated both engines' figures in earlier results.

- checker.trace: ``load(path)``, ``get_steps()``, ``get_gpu_idle()``.
- HTA: ``TraceAnalysis(trace_dir=...)`` (parses every rank's file), ``get_profiler_steps()``,
  ``get_idle_time_breakdown()``.

The large traces are made from a real one (tests/data/traces/pageable_item/kineto.json.gz, 7 steps of a
small model on an H100) by repeating its events with shifted times and ids, so they have the shape of a
real torch.profiler trace with stacks. HTA is not a dependency: install it in its own environment and
point --hta-python at that interpreter:

    python -m venv /work/benchvenv && /work/benchvenv/bin/pip install holistictraceanalysis
    python scripts/bench_trace.py --events 1000000 3000000 --repeat 3 --hta-python /work/benchvenv/bin/python \
        --out evidence/results/bench/trace_engine_vs_hta.md

Each engine runs on cores 0,1 (``--cores``), the two engines interleaved, ``--repeat`` times per size; the
table shows the median time and the median peak memory, and the results line records the machine's load
average when the run began (a shared machine slows both engines alike, so the ratios hold better than the
seconds). The goal: at least 3x faster than HTA at no more than 1/3 of its memory, and 3M events in at most
30 s on 2 cores.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEED = ROOT / "tests" / "data" / "traces" / "pageable_item" / "kineto.json.gz"

OURS = """
import resource, sys, time
t0 = time.perf_counter()
from checker.trace import load
trace = load(sys.argv[1])
steps = trace.get_steps()
idle = trace.get_gpu_idle()
wall = time.perf_counter() - t0
peak = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) / 1024  # this process's own peak RSS
print(f"{wall:.3f} {peak:.1f} {len(trace.events)} {len(steps)} {idle['idle_ns'].sum()}")
"""

HTA = """
import logging, resource, sys, time, warnings
warnings.filterwarnings("ignore")
logging.disable(logging.CRITICAL)
t0 = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
analysis = TraceAnalysis(trace_dir=sys.argv[1])
steps = analysis.get_profiler_steps()
idle = analysis.get_idle_time_breakdown(visualize=False)
wall = time.perf_counter() - t0
peak = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) / 1024  # this process's own peak RSS
print(f"{wall:.3f} {peak:.1f} {len(analysis.t.get_trace(0))} {len(steps)} -")
"""


def synthesize(n_events: int, out: Path, seed: Path = SEED) -> int:
    """Write a Kineto trace of about n_events events by repeating the seed's; returns the event count."""
    with gzip.open(seed, "rt") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    timed = [e for e in events if isinstance(e.get("ts"), (int, float)) and e.get("ph") in ("X", "s", "f")]
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start + 100.0
    copies = max(1, round(n_events / len(timed)))
    step_base = 7
    doc.setdefault("distributedInfo", {"backend": "nccl", "rank": 0, "world_size": 1})
    written = 0
    with open(out, "w") as fh:
        head = json.dumps(doc, indent=2)[:-2]  # the metadata object, left open
        fh.write(head + ',\n  "traceEvents": [\n')
        first = True
        for k in range(copies):
            shift, bump = k * span, k * 1_000_000
            for e in timed:
                e2 = dict(e)
                e2["ts"] = round(e["ts"] + shift, 3)
                if "id" in e2 and isinstance(e2["id"], int):
                    e2["id"] += bump
                name = e2.get("name", "")
                if name.startswith("step ") and name[5:].isdigit():
                    e2["name"] = f"step {int(name[5:]) + k * step_base}"
                args = e2.get("args")
                if args:
                    args = dict(args)
                    for key in ("correlation", "External id"):
                        if isinstance(args.get(key), int):
                            args[key] += bump
                    e2["args"] = args
                fh.write(("" if first else ",\n") + "  " + json.dumps(e2))
                first = False
                written += 1
        fh.write('\n  ],\n  "traceName": "synthetic"\n}\n')
    return written


def run_engine(script: str, python: str, target: str, cores: str | None) -> tuple[float, float, str]:
    cmd = [python, "-c", script, target]
    if cores:
        cmd = ["taskset", "-c", cores] + cmd
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{python} failed on {target}:\n{done.stderr[-2000:]}")
    wall, peak, *rest = done.stdout.strip().splitlines()[-1].split()
    return float(wall), float(peak), " ".join(rest)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="checker.trace vs HolisticTraceAnalysis: time and memory")
    parser.add_argument("--events", type=int, nargs="+", default=[1_000_000, 3_000_000])
    parser.add_argument("--hta-python", help="an interpreter with holistictraceanalysis installed")
    parser.add_argument("--cores", default="0,1", help="taskset core list ('' for no pinning)")
    parser.add_argument("--workdir", default=None, help="where to write the synthetic traces")
    parser.add_argument("--out", type=Path, help="also write the table, with the machine and versions, here")
    parser.add_argument("--repeat", type=int, default=1, help="runs per engine and size (median reported)")
    args = parser.parse_args(argv)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="bench_trace_"))
    work.mkdir(parents=True, exist_ok=True)
    cores = args.cores or None
    load_at_start = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    rows = []
    for n in args.events:
        folder = work / f"n{n}"
        folder.mkdir(exist_ok=True)
        path = folder / "rank-0.json"
        if not path.exists():
            count = synthesize(n, path)
        else:
            count = sum(1 for _ in open(path)) - 3
        size_mb = path.stat().st_size / 1e6
        runs_ours, runs_hta = [], []
        for _ in range(max(1, args.repeat)):
            runs_ours.append(run_engine(OURS, sys.executable, str(path), cores))
            if args.hta_python:
                runs_hta.append(run_engine(HTA, args.hta_python, str(folder), cores))
            print(f"  run: checker.trace {runs_ours[-1][0]:.2f} s"
                  + (f", HTA {runs_hta[-1][0]:.2f} s" if runs_hta else ""), file=sys.stderr)
        ours = _median(runs_ours)
        hta = _median(runs_hta) if runs_hta else None
        rows.append((count, size_mb, ours, hta))
        print(f"{count:,} events ({size_mb:.0f} MB): checker.trace {ours[0]:.2f} s {ours[1]:.0f} MB"
              + (f"; HTA {hta[0]:.2f} s {hta[1]:.0f} MB" if hta else ""), file=sys.stderr)
    lines = ["| events | JSON MB | checker.trace s | checker.trace peak MB | HTA s | HTA peak MB | speed-up | memory ratio |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for count, size_mb, ours, hta in rows:
        if hta:
            lines.append(f"| {count:,} | {size_mb:.0f} | {ours[0]:.2f} | {ours[1]:.0f} | {hta[0]:.2f} | {hta[1]:.0f} | "
                         f"{hta[0] / ours[0]:.1f}x | {ours[1] / hta[1]:.2f} |")
        else:
            lines.append(f"| {count:,} | {size_mb:.0f} | {ours[0]:.2f} | {ours[1]:.0f} | - | - | - | - |")
    print("\n" + "\n".join(lines))
    if args.out:
        args.out.write_text(_machine(args.hta_python, cores, args.repeat, load_at_start) + "\n\n" + "\n".join(lines) + "\n")
    return 0


def _median(runs: list[tuple[float, float, str]]) -> tuple[float, float, str]:
    """The median wall time and the median peak memory of several runs of one engine."""
    import statistics

    return (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs), runs[0][2])


def _machine(hta_python: str | None, cores: str | None, repeat: int = 1, load: float = float("nan")) -> str:
    """One line naming what the benchmark ran on: CPU, cores used, versions, date."""
    import datetime
    import platform

    import pandas
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    hta = "not run"
    if hta_python:
        hta = subprocess.run([hta_python, "-c", "import importlib.metadata as m; print(m.version('HolisticTraceAnalysis'))"],
                             capture_output=True, text=True).stdout.strip() or "?"
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    return (f"Measured by `scripts/bench_trace.py` on {cpu} (cores {cores or 'all'} of {os.cpu_count()}), Python "
            f"{platform.python_version()}, pandas {pandas.__version__}, torch {torch.__version__}, "
            f"HolisticTraceAnalysis {hta}, {date}, load average {load:.1f} at the start. Parse + steps + GPU idle, "
            f"each engine in a fresh process, interleaved, median of {repeat} runs.")


if __name__ == "__main__":
    raise SystemExit(main())
