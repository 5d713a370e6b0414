"""Render the GPU verification of the grader's trust boundary from the raw check rows.

    python evidence/made-by/summarize_trust_run.py evidence/history/2026-11-23-h100-trust-*.jsonl \
        --env evidence/history/2026-11-23-h100-trust-1.env.json > docs/results/trust-gpu.md

Each row is one `workbook check` made by scripts/gpu_verify.sh (its checks stage). A solution must pass, a lab
must fail, and a red-team cheat (variant cheat/...) must be rejected: exit 1 with a check failed, or exit 2.
Nothing here is typed by hand: every number comes from a row.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from checker.checks import KEY_MEASURE


def expected(variant: str) -> str:
    return {"solution": "passes", "lab": "fails"}.get(variant, "rejected")


def outcome(row: dict) -> str:
    code = row.get("exit_code")
    if code == 0:
        return "passed"
    if code == 1:
        return "failed: " + ", ".join(c["name"] for c in row.get("checks", []) if c["status"] == "failed")
    return f"refused (exit {code})" if code == 2 else f"no verdict (exit {code})"


def holds(row: dict) -> bool:
    want, code = expected(row["variant"]), row.get("exit_code")
    return (want == "passes" and code == 0) or (want == "fails" and code == 1) or (want == "rejected" and code in (1, 2))


def cell(check: dict) -> str:
    key, fmt = KEY_MEASURE.get(check["name"], (None, None))
    value = (check.get("measured") or {}).get(key) if key else None
    shown = check["status"] if value is None else f"{check['status']} · {fmt.format(value)}"
    if check["name"] == "same_work" and (check.get("measured") or {}).get("weight_distance") is not None:
        shown += f" · weights {check['measured']['weight_distance']:.3f} apart"
    return shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rows", nargs="+", type=Path, help="checks.jsonl files of gpu_verify.sh runs")
    parser.add_argument("--env", type=Path, required=True, help="the env.json of the same machine")
    parser.add_argument("--before-fix", action="append", default=[], metavar="FILE:LINE=WHAT",
                        help="a row made before a fix to the code, and the fix (shown apart, never dropped)")
    args = parser.parse_args(argv)
    env = json.loads(args.env.read_text())
    fixes = {}
    for item in args.before_fix:
        where, _, what = item.partition("=")
        name, _, number = where.rpartition(":")
        fixes[(name, int(number))] = what
    rows, earlier = [], []
    for path in args.rows:
        for number, text in enumerate(path.read_text().splitlines(), 1):
            if text.strip():
                row = json.loads(text)
                if (path.name, number) in fixes:
                    earlier.append((row, fixes.pop((path.name, number))))
                else:
                    rows.append(row)
    if fixes:
        parser.error(f"--before-fix names no row: {', '.join(f'{n}:{i}' for n, i in fixes)}")
    out = [
        "# The grader's trust boundary on a GPU",
        "",
        f"Measured on {env['gpu']}, driver {env['driver']}, torch {env['torch']} (CUDA {env['cuda']}), "
        f"{env['date'][:10]}; rows in {', '.join(sorted({p.name for p in args.rows}))}. Cheats were graded with "
        "the source scan off (WORKBOOK_SCAN=0), so that the runs' own defences are what rejected them.",
        "",
        f"{sum(holds(r) for r in rows)} of {len(rows)} checks ended as they must (solutions pass, labs fail, "
        "cheats are rejected).",
        "",
        "| chapter | what | tool | must | outcome | checks | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    out += [line(row) for row in rows]
    if earlier:
        out += ["", "## Runs made before a fix, and the fix", "",
                "| chapter | what | tool | must | outcome | checks | wall s | fixed since |",
                "|---|---|---|---|---|---|---|---|"]
        out += [line(row)[:-1] + f"| {what} |" for row, what in earlier]
    sys.stdout.write("\n".join(out) + "\n")


def line(row: dict) -> str:
    checks = "<br>".join(f"{c['name']}: {cell(c)}" for c in row.get("checks", []) if c["status"] != "skipped")
    if not row.get("checks"):
        checks = (row.get("error") or "").strip().splitlines()[-1][:160] if row.get("error") else ""
    mark = "" if holds(row) else " **(!)**"
    only = f" (--only {row['only']})" if row.get("only") else ""
    return (f"| {row['chapter']} | {row['variant']}{only} | {row['trace_tool']} | {expected(row['variant'])} "
            f"| {outcome(row)}{mark} | {checks} | {row.get('wall_s_outer', '')} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
