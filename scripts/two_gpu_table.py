"""One class graded on one GPU and on two, as a table: what scripts/grade_two_gpus.sh recorded.

    python scripts/two_gpu_table.py RUN-grade_two_gpus.json [RUN2-grade_two_gpus.json ...] --out docs/results/grading-two-gpus-h100

Each input is one call's `grade_two_gpus.json` (a device call is limited to 10 minutes, so the stages may come
from separate calls); beside it, `RUN-<stage>-ledger.jsonl` is that stage's ledger, from which each student's
failed checks are read. Writes <out>.json (the stages merged, with each call's machine) and <out>.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checker.grading.ledger import read_records  # noqa: E402

STAGE_ORDER = ("one_gpu", "two_gpus")


def merge(paths: list[Path]) -> dict:
    """The stages of every call in one record; the machine of each call kept beside its stage."""
    merged: dict = {"sources": [path.name for path in paths], "stages": {}, "expected": {}}
    for path in paths:
        data = json.loads(path.read_text())
        machine = {key: data.get(key) for key in ("gpus", "driver", "torch", "cuda", "date")}
        for key, stage in data["stages"].items():
            ledger = path.with_name(path.name.replace("grade_two_gpus.json", f"{key}-ledger.jsonl"))
            records = {record["student"]: record for record in read_records(ledger)}  # a student's last is its grade
            students = {name: {**row, "failed_checks": records.get(name, {}).get("failed_checks"),
                               "worker": records.get(name, {}).get("worker")}
                        for name, row in stage["students"].items()}
            merged["stages"][key] = {**{k: stage[k] for k in ("gpus", "wall_s", "exit_code", "resumed")},
                                     "students": students, "machine": machine, "source": path.name}
        merged["expected"].update(data.get("expected", {}))
        for name, row in data.get("checks", {}).items():  # `workbook check` of each student, one at a time
            merged.setdefault("checks", {})[name] = {k: row[k] for k in ("verdict", "wall_s", "failed_checks")}
        if data.get("checks"):
            merged["checks_run"] = {"source": path.name, "machine": machine}
        merged["chapter"], merged["class_size"] = data["chapter"], data["class_size"]
    return merged


def render(merged: dict) -> str:
    stages = [merged["stages"][key] for key in STAGE_ORDER if key in merged["stages"]]
    machines = []
    for stage in stages:
        m = stage["machine"]
        line = (f"{len(m['gpus'])} x {m['gpus'][0]}, driver {', '.join(m['driver'])}, torch {m['torch']} (CUDA "
                f"{m['cuda']})" if m["gpus"] else f"no GPU (the CPU), torch {m['torch']}")
        if line not in machines:
            machines.append(line)
    expected = merged["expected"]
    lines = [f"Chapter {merged['chapter']}, a class of {merged['class_size']} graded with `workbook grade --device cuda "
             f"--gpus 0`, then `--gpus 0,1`, each from nothing, by `scripts/grade_two_gpus.sh`, rendered by "
             f"`scripts/two_gpu_table.py`. Machine: {'; '.join(machines)}. Expected: the reference solution and "
             "its restyling pass; the lab, the slow script and the red-team cheats do not.", "",
             "| stage | GPUs | started | wall s | s per student | exit | resumed | verdicts as expected |",
             "|---|---|---|---:|---:|---:|---|---|"]
    for key, stage in zip([k for k in STAGE_ORDER if k in merged["stages"]], stages):
        students = stage["students"]
        as_expected = all((row["verdict"] == "passed") == (expected.get(name) == "passed")
                          for name, row in students.items())
        lines.append(f"| {key.replace('_', ' ')} | {stage['gpus']} | {stage['machine']['date']} | {stage['wall_s']:.1f} | "
                     f"{stage['wall_s'] / len(students):.1f} | {stage['exit_code']} | "
                     f"{'yes' if stage['resumed'] else 'no'} | {'yes' if as_expected else 'NO'} |")
    if len(stages) == 2:
        one, two = stages
        same = {n: r["verdict"] for n, r in one["students"].items()} == \
               {n: r["verdict"] for n, r in two["students"].items()}
        lines += ["", f"Two GPUs took {two['wall_s'] / one['wall_s']:.2f}x the wall time of one; every student's "
                  f"pass or fail {'was the same' if same else 'was NOT the same'} on one GPU and on two."]
    checks = merged.get("checks")
    if checks:
        agree = all(checks[name]["verdict"] == stage["students"][name]["verdict"]
                    for stage in stages for name in checks if name in stage["students"])
        run = merged.get("checks_run") or {}
        where = (f" ({run['machine']['gpus'][0]}, {run['machine']['date'][:10]}, `{run['source']}`)"
                 if run.get("machine", {}).get("gpus") else "")
        lines += ["", f"`workbook check --submission` of each student on one GPU{where}, one at a time: every "
                  f"pass or fail {'the same as' if agree else 'NOT always the same as'} grading's."]
    lines += ["", "| student | expected | " + " | ".join(f"{k.replace('_', ' ')}: verdict (failed checks), s, worker"
                                                    for k in STAGE_ORDER if k in merged["stages"])
              + (" | workbook check: verdict (failed checks), s" if checks else "") + " |",
              "|---|---|" + "---|" * (len(stages) + bool(checks))]
    for name in sorted(expected):
        cells = []
        for stage in stages:
            row = stage["students"].get(name)
            if row is None:
                cells.append("not graded")
                continue
            failed = f" ({', '.join(row['failed_checks'])})" if row.get("failed_checks") else ""
            worker = (row.get("worker") or "").split(" (")[0]
            cells.append(f"{row['verdict']}{failed}, {float(row['wall_s']):.1f}, {worker}".rstrip(", "))
        if checks:
            row = checks.get(name)
            failed = f" ({', '.join(row['failed_checks'])})" if row and row.get("failed_checks") else ""
            cells.append(f"{row['verdict']}{failed}, {row['wall_s']:.1f}" if row else "not checked")
        lines.append(f"| {name} | {expected[name]} | " + " | ".join(cells) + " |")
    walls = [float(r["wall_s"]) for stage in stages for r in stage["students"].values() if r.get("wall_s")]
    if walls:
        lines += ["", f"Per-student wall time (the ledger's, both stages): median {statistics.median(walls):.1f} s, "
                  f"{min(walls):.1f}-{max(walls):.1f} s."]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    missing = [str(p) for p in args.runs if not p.is_file()]
    if missing:
        raise SystemExit(f"two_gpu_table: no such file: {', '.join(missing)}")
    merged = merge(args.runs)
    args.out.with_suffix(".json").write_text(json.dumps(merged, indent=1) + "\n")
    args.out.with_suffix(".md").write_text(render(merged))
    print(render(merged))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
