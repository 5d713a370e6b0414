"""Measure a chapter's slow script against its solution over several workload settings.

Predict, then measure: use this to choose a chapter's workload before fixing thresholds in chapter.toml.

    python scripts/sweep.py 01 --device cuda --trials 2 --set batch_size=128,256 --set width=64,128

Every combination runs baseline and solution alternately in separate processes (as `workbook check` does)
and prints samples/s and the median speedup. --json writes the rows to a file.
"""

from __future__ import annotations

import argparse
import itertools
import json
import secrets
import statistics
import sys
from pathlib import Path

from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from checker.candidate.session import _coerce
from checker.grader.collect import ask_referee
from checker.grader.runs import IncompleteWork, run_script
from checker.grader.sandbox import check_folder


def held_out_losses(chapter, device: str, runs: dict, base: str, overrides: list[str]) -> dict[str, list[float]]:
    """The referee's held-out loss of every run, by variant (runs of a trial share a seed)."""
    if not runs[base]:
        return {}
    cfg = {k: _coerce(v) for k, _, v in (o.partition("=") for o in overrides)}
    pairs = [(b, c) for v, rs in runs.items() if v != base and len(rs) == len(runs[base]) for b, c in zip(runs[base], rs)]
    if not pairs:
        return {}
    judged = ask_referee(chapter, device, pairs, check_folder(), cfg=cfg)
    out: dict[str, list[float]] = {base: [judged[i]["baseline"].get("eval_loss") for i in range(len(runs[base]))]}
    index = 0
    for v, rs in runs.items():
        if v != base and len(rs) == len(runs[base]):
            out[v] = [judged[index + i]["candidate"].get("eval_loss") for i in range(len(rs))]
            index += len(rs)
    return {v: [x for x in xs if x is not None] for v, xs in out.items()}


def run_detail(run) -> dict:
    """One run's timed window: its speed, its steps' times on the grader's clock (is a slow run slow in every step,
    or in a few?), and the CPU its own process used per second of window (below 1: it waited, or was not scheduled)."""
    steps = sorted(run.step_ms)
    at = lambda q: round(steps[min(len(steps) - 1, int(q * len(steps)))], 3) if steps else None  # noqa: E731
    detail = {"samples_per_s": round(run.samples_per_s, 1), "step_ms_p10": at(0.1), "step_ms_p50": at(0.5),
              "step_ms_p90": at(0.9), "step_ms_max": at(1.0), "steps": len(steps)}
    if run.window_cpu_ns and run.window_s:
        detail["cpu_per_window_s"] = round(run.window_cpu_ns[0] / 1e9 / run.window_s, 3)
    return detail


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("chapter")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=2)
    parser.add_argument("--steps", type=int, default=None)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=V1,V2")
    parser.add_argument("--variants", default="slow,solution", help="baseline first, then candidates")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--tag", default=None, help="copied into every row (which sweep it came from)")
    args = parser.parse_args()
    chapter = get_chapter(args.chapter)
    axes = [(k, v.split(",")) for k, _, v in (s.partition("=") for s in args.set)]
    variants = args.variants.split(",")
    rows = []
    for values in itertools.product(*[vals for _, vals in axes]):
        overrides = [f"{k}={v}" for (k, _), v in zip(axes, values)]
        extra = [a for o in overrides for a in ("--set", o)]
        runs = {v: [] for v in variants}
        for trial in range(args.trials):
            order = variants if trial % 2 == 0 else variants[::-1]
            seed, key = secrets.randbelow(2**31 - 1) + 1, secrets.randbelow(2**31 - 1) + 1  # one secret a trial
            for variant in order:
                try:
                    r = run_script(chapter, chapter.script_for(variant), args.device, steps=args.steps, extra_args=extra,
                                   seed=seed, window_key=key)
                except (WorkbookError, IncompleteWork) as err:  # one broken setting must not end the sweep
                    print(json.dumps({"chapter": chapter.id, "settings": overrides, "variant": variant,
                                      "error": str(err)[-400:]}), flush=True)
                    continue
                runs[variant].append(r)
        base = variants[0]
        row = {"chapter": chapter.id, "tag": args.tag, "settings": overrides}
        losses = held_out_losses(chapter, args.device, runs, base, overrides)
        for v in variants:
            if not runs[v]:
                continue
            row[f"{v}_warmup_s"] = round(statistics.median(r.phases_s.get("warm-up", 0.0) for r in runs[v]), 1)
            row[f"{v}_samples_per_s"] = round(statistics.median(r.samples_per_s for r in runs[v]), 1)
            if losses.get(v):
                row[f"{v}_eval_loss"] = round(statistics.median(losses[v]), 4)
            if v != base and runs[base] and len(runs[v]) == len(runs[base]):
                ratios = [c.samples_per_s / b.samples_per_s for c, b in zip(runs[v], runs[base])]
                row[f"{v}_speedup"] = round(statistics.median(ratios), 3)
                row[f"{v}_speedups"] = [round(x, 3) for x in ratios]
            row[f"{v}_runs"] = [run_detail(r) for r in runs[v]]
        rows.append(row)
        print(json.dumps(row), flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
