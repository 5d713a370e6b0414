"""Where a check's seconds go: one row per `workbook check`, from the rows scripts/gpu_verify.sh wrote.

    python scripts/phase_table.py OUT/checks.jsonl --env OUT/env.json --label before --out evidence/results/check-phases-h100-before

Writes <out>.json (the machine, and per check its phases summed over its runs) and <out>.md (the table). Every
number comes from the grader's own `timings` in each report (each run's phases on the grader's clock, the
referee, trace parsing, the isolation probe, the tamper scan) and gpu_verify.sh's wall time of the whole command.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

RUN_PHASES = ("start-up", "build", "setup", "warm-up", "timed", "after", "exit")


def row_of(report: dict) -> dict | None:
    """One check's seconds by phase; None for a check that left no report (cut off)."""
    if "timings" not in report:
        return None
    timings = report["timings"]
    runs = [t for t in timings if t["kind"] == "run"]
    phases = {name: round(sum(t.get("phases", {}).get(name, 0.0) for t in runs), 1) for name in RUN_PHASES}
    kinds = {t["kind"] for t in timings}
    spent = {kind: round(sum(t["wall_s"] for t in timings if t["kind"] == kind), 1) if kind in kinds else None
             for kind in ("referee", "parse", "ncu", "probe", "tamper")}  # None: not timed by that grader
    inside = round(sum(t["wall_s"] for t in timings), 1)
    wall = report.get("wall_s_outer")
    verdict = "passed" if report.get("passed") else "failed"
    return {"chapter": report.get("chapter"), "variant": report.get("variant"), "trace": report.get("trace_tool"),
            "verdict": verdict,
            "check_wall_s": wall, "runs": len(runs), **phases, **spent,
            "forked": sum(1 for t in runs if t.get("forked")) if any("forked" in t for t in runs) else None,
            "env": " ".join(f"{k}={v}" for k, v in sorted((report.get("env_vars") or {}).items())) or None,
            "outside_timings_s": round(wall - inside, 1) if wall is not None else None,
            "timed_pairs": next((c["measured"].get("trials") for c in report.get("checks", [])
                                 if c["name"] == "throughput" and c.get("measured")), None)}


def render(env: dict, rows: list[dict], label: str, left_out: list[str]) -> str:
    head = (f"# Where a check's seconds go ({label})\n\n"
            f"{env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, {env.get('date')}: one "
            "`workbook check --json` per row, made by `scripts/gpu_verify.sh`, rendered by `scripts/phase_table.py` "
            "from the grader's own timings. Run phases are summed over the check's runs (each run: start-up = "
            "Python, torch and the checker imported; build = the chapter's workload; setup = the script's own set-up, "
            "CUDA's start included; warm-up = untimed steps, torch.compile included; timed = the window; after, exit). "
            "An empty cell: that grader did not time it. `outside` is the command's wall time not in any timing: the `workbook` process's own start (torch "
            "imported, CUDA asked for) and the scan of the source.")
    columns = ["chapter", "variant", "trace", "verdict", "check_wall_s", "runs", "timed_pairs", *RUN_PHASES, "referee",
               "parse", "ncu", "probe", "tamper", "outside_timings_s"]
    extra = [c for c in ("forked", "env") if any(row.get(c) is not None for row in rows)]  # the fork server's A/B
    if extra:
        head += (" `forked`: runs forked by the fork server (checker/grader/forkserver.py), which start with torch "
                 "imported; `env`: the switch a row ran with.")
    head += "\n\n"
    columns += extra
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in rows:
        lines.append("| " + " | ".join("" if row.get(c) is None else str(row.get(c)) for c in columns) + " |")
    tail = "".join(f"\n- left out: {item}" for item in left_out)
    return head + "\n".join(lines) + "\n" + (tail + "\n" if tail else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checks", type=Path, nargs="+")
    parser.add_argument("--env", type=Path, required=True)
    parser.add_argument("--label", required=True)
    parser.add_argument("--out", type=Path, required=True, help="path without suffix: .json and .md are written")
    args = parser.parse_args()
    env = json.loads(args.env.read_text())
    rows, left_out = [], []
    for path in args.checks:
        for line in path.read_text().splitlines():
            report = json.loads(line)
            row = row_of(report)
            if row is None:
                said = (report.get("error") or "").strip().splitlines()
                said = [line for line in said if line.startswith("workbook:")] or said  # the grader's own line first
                why = f"it ended: {said[-1][:240]}" if said else "cut off"
                left_out.append(f"{report.get('chapter')} {report.get('variant')}: no report after "
                                f"{report.get('wall_s_outer')} s, exit {report.get('exit_code')} ({why})")
            else:
                rows.append(row)
    args.out.with_suffix(".json").write_text(json.dumps({"env": env, "label": args.label, "rows": rows,
                                                         "left_out": left_out}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(env, rows, args.label, left_out))
    print(args.out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
