"""The red-team cheats of a GPU run, each with its verdict and the evidence that rejected it.

    python scripts/cheat_table.py OUT/checks.jsonl --env OUT/env.json --out evidence/results/redteam-gpu-DATE.md

Reads the rows scripts/gpu_verify.sh wrote (items cheat:<folder>:<chapter>:<tool>); writes the Markdown table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def render(env: dict, rows: list[dict]) -> str:
    lines = [f"# Red-team cheats on a GPU ({env.get('gpu')})", "",
             f"{env.get('gpu')}, driver {env.get('driver')}, torch {env.get('torch')}, {env.get('date')}: each cheat "
             "graded with `workbook check --submission` by `scripts/gpu_verify.sh` (scan off, so that the run's own "
             "defences are what reject it), rendered by `scripts/cheat_table.py`.", "",
             "| cheat | chapter | trace | exit | failed checks | the evidence that rejected it |", "|---|---|---|---|---|---|"]
    for row in rows:
        if not str(row.get("variant", "")).startswith("cheat/"):
            continue
        failed = [c for c in row.get("checks", []) if c["status"] == "failed"]
        evidence = "; ".join(f"{c['name']}: {(c.get('evidence') or [''])[0]}" for c in failed)
        if not failed and row.get("error"):  # stopped or refused before any check: the grader's one line
            evidence = "refused: " + row["error"].strip().splitlines()[-1].removeprefix("workbook: ")
        lines.append(f"| {row['variant'].removeprefix('cheat/')} | {row.get('chapter')} | {row.get('trace_tool')} | "
                     f"{row.get('exit_code')} | {', '.join(c['name'] for c in failed) or 'none'} | "
                     f"{evidence.replace('|', '/')} |")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checks", type=Path)
    parser.add_argument("--env", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    rows = [json.loads(line) for line in args.checks.read_text().splitlines()]
    args.out.write_text(render(json.loads(args.env.read_text()), rows))
    print(args.out.read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
