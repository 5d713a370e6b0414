"""How far honest code lands from the slow script's weights, check after check: what same_work must clear.

same_work judges a candidate by how far its trained weights land from the slow script's, trained side by side
under the same secrets (over all tensors, and the worst single layer). Code that does the same work in another
order of arithmetic (a fused optimizer, bf16, NHWC kernels) lands a little away, and how far moves from check
to check: each check draws new secrets, and a training that is still swinging can blow a last-bit difference
up. This runs `workbook check NN --submission DIR --only same_work --json` N times and records the spread.

    python scripts/same_work_spread.py 07 tests/redteam/cpu/fused_07 --checks 40 --out evidence/history/X

Pass the chapter's tolerances only after this spread (the largest honest value) and the cheats' (the smallest
dishonest one) have been measured on the same device.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_noise import machine  # noqa: E402  (a script beside this one)


def one_check(chapter: str, submission: str, device: str | None) -> dict:
    command = [sys.executable, "-m", "checker", "check", chapter, "--only", "same_work", "--json"]
    command += ["--submission", submission] if Path(submission).is_dir() else ["--variant", submission]
    command += ["--device", device] if device else []
    done = subprocess.run(command, capture_output=True, text=True)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"status": "error", "error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
    check = next(c for c in report["checks"] if c["name"] == "same_work")
    measured = check.get("measured") or {}
    return {"status": check["status"], "weight_distance": measured.get("weight_distance"),
            "worst_layer": measured.get("worst_layer"), "evidence": check.get("evidence", [])[:1],
            "device": report.get("device")}


def render(args, env: dict, rows: list[dict]) -> str:
    judged = [r for r in rows if r.get("weight_distance") is not None]
    distance, layer = [r["weight_distance"] for r in judged], [r["worst_layer"] for r in judged]
    failed = [r for r in rows if r["status"] == "failed"]
    errors = [r for r in rows if r["status"] not in ("passed", "failed")]
    lines = [f"`scripts/same_work_spread.py {args.chapter} {args.submission} --checks {args.checks}` on "
             f"{env.get('gpu') or env['cpu']} ({env['cores']} cores), torch {env['torch']}, {env['date'][:10]}.",
             "Each row is one `workbook check --only same_work`: new secrets, a new side-by-side pair.", "",
             f"- checks: {len(rows)}, same_work failed in {len(failed)}, no verdict in {len(errors)}",
             f"- checks whose weights differ from the slow script's at all (distance > 0 at 4 decimals): "
             f"{sum(1 for d in distance if d > 0)}"]
    if judged:
        lines += [f"- distance over all tensors: median {statistics.median(distance):.4f}, max {max(distance):.4f}",
                  f"- worst single layer: median {statistics.median(layer):.4f}, max {max(layer):.4f}"]
    lines += ["", "| check | status | over all tensors | worst layer |", "|---|---|---|---|"]
    lines += [f"| {i} | {r['status']} | {r.get('weight_distance', '')} | {r.get('worst_layer', '')} |"
              for i, r in enumerate(rows, 1)]
    for r in failed + errors:
        lines.append(f"\n{r['status']}: {(r.get('evidence') or [r.get('error', '')])[0]}")
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("chapter")
    parser.add_argument("submission", help="a folder holding the lab file, or slow, lab or solution")
    parser.add_argument("--checks", type=int, default=20, help="how many checks (default 20)")
    parser.add_argument("--device", choices=("cpu", "cuda"))
    parser.add_argument("--out", type=Path, required=True, help="writes OUT.json (every check) and OUT.md")
    parser.add_argument("--render", action="store_true", help="only rewrite OUT.md from OUT.json")
    args = parser.parse_args()
    if args.render:
        saved = json.loads(args.out.with_suffix(".json").read_text())
        args.out.with_suffix(".md").write_text(render(args, saved["env"], saved["rows"]))
        return 0
    env = machine()
    try:
        import torch
        if torch.cuda.is_available() and args.device != "cpu":
            env["gpu"] = torch.cuda.get_device_name()
    except ImportError:
        pass
    rows = []
    for i in range(args.checks):
        rows.append(one_check(args.chapter, args.submission, args.device))
        row = rows[-1]
        print(f"{i + 1}/{args.checks}: {row['status']} {row.get('weight_distance')} {row.get('worst_layer')} "
              f"{row.get('error', '')}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps({"env": env, "args": vars(args) | {"out": str(args.out)},
                                                         "rows": rows}, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(args, env, rows))
    print(args.out.with_suffix(".md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
