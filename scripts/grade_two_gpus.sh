#!/usr/bin/env bash
# Grade one class of CLASS_SIZE (default 8) submissions of CHAPTER (default 01) on CUDA, once on one GPU
# (--gpus 0) and once on two (--gpus 0,1), and write what was measured to $OUT/grade_two_gpus.json:
# GPU names, driver, torch and CUDA versions, date, each stage's wall time, every student's verdict and
# seconds, and whether both stages gave the same verdicts (issue 12, item 5).
#
#     OUT=/tmp/out bash scripts/grade_two_gpus.sh [one|two|both|check]      # default: both
#
# The class (CLASS=mixed, the default) is the chapter's reference solution, its unmodified lab, its slow script, an
# honest restyling of the solution (the same program with its comments and layout changed by ast.unparse), and
# then the red-team cheats of tests/redteam (bank.toml and gpu.toml) written for this chapter, in that order,
# until CLASS_SIZE: each student's expected outcome (pass for the solution and its restyling, no pass for all
# others) is recorded beside the verdict. CHEATS=a,b,... picks the cheats by name instead. CLASS=pairs alternates
# solution and lab only. Each stage grades into its own folder from nothing (--force), so a stage can run as a
# command of its own (a device call is
# limited to 10 minutes: run `one`, then `two`; the JSON gathers both). A stage that hits a limit can be run
# again: the grader resumes, and the JSON marks that stage "resumed" (its wall time is then not comparable).
# `check` runs `workbook check --submission` of every student on GPU 0 instead, one at a time (under "checks" in
# the JSON): the verdicts grading must agree with. DEVICE=cpu runs the `one` and `check` stages on the CPU (the
# tests do, so that a GPU call does not find this script's mistakes); `two` needs two GPUs.
set -euo pipefail
cd "$(dirname "$0")/.."
STAGE="${1:-both}"
OUT="${OUT:?set OUT to the folder for results}"
CHAPTER="${CHAPTER:-01}"
CLASS_SIZE="${CLASS_SIZE:-8}"
CLASS="${CLASS:-mixed}"
CHEATS="${CHEATS:-}"
DEVICE="${DEVICE:-cuda}"
WORK="${WORK:-$OUT/grade-two-gpus}"
mkdir -p "$OUT" "$WORK"
export WORKBOOK_ROOT="$PWD" PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" STAGE CHAPTER CLASS_SIZE CLASS CHEATS DEVICE WORK OUT
python3 - <<'PY'
import csv, json, os, shutil, subprocess, sys, time
from datetime import datetime, timezone
from pathlib import Path

from checker.base.chapters import get_chapter

chapter = get_chapter(os.environ["CHAPTER"])
work, out = Path(os.environ["WORK"]), Path(os.environ["OUT"])
size, stage, device = int(os.environ["CLASS_SIZE"]), os.environ["STAGE"], os.environ["DEVICE"]
results_path = out / "grade_two_gpus.json"
results = json.loads(results_path.read_text()) if results_path.exists() else {"stages": {}}

def query(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""

import torch
results.update(
    gpus=[torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())],
    driver=query(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"]).splitlines()[:1],
    torch=torch.__version__, cuda=torch.version.cuda, date=datetime.now(timezone.utc).isoformat(timespec="seconds"),
    chapter=chapter.id, class_size=size, command=f"workbook grade {chapter.id} class --out ... --gpus ...")

def class_members():
    """(name, source text, expected) for every student of the class: expected is 'passed' or 'not passed'."""
    import ast, tomllib
    if os.environ["CLASS"] == "pairs":
        for i in range(size):
            variant = "solution" if i % 2 == 0 else "lab"
            yield variant, chapter.script_for(variant).read_text(), "passed" if variant == "solution" else "not passed"
        return
    solution = chapter.solution_script.read_text()
    yield "solution", solution, "passed"
    yield "lab", chapter.lab_script.read_text(), "not passed"
    yield "slow", chapter.slow_script.read_text(), "not passed"
    yield "restyled", ast.unparse(ast.parse(solution)) + "\n", "passed"
    bank, chosen, seen = Path("tests/redteam"), [n for n in os.environ["CHEATS"].split(",") if n], set()
    for book, default_dir in (("bank.toml", "cheats"), ("gpu.toml", None)):
        for name, item in tomllib.loads((bank / book).read_text())["cheats"].items():
            folder = bank / (item.get("path") or f"{default_dir}/{name}")
            script = folder / chapter.lab_file
            if (chosen and name not in chosen) or name in seen:
                continue
            if (chapter.id.startswith(f"{item.get('chapter')}_") and not item.get("copy") and not item.get("only")
                    and item.get("runs", 1) == 1 and script.exists() and len(list(folder.iterdir())) == 1):
                seen.add(name)
                yield f"cheat-{name}", script.read_text(), "not passed"

submissions = work / "class"
expected = {}
members = list(class_members())[:size]
for i, (name, text, outcome) in enumerate(members):
    student = f"student{i:02d}-{name}"
    expected[student] = outcome
    if not (submissions / student).exists():
        (submissions / student).mkdir(parents=True)
        (submissions / student / chapter.lab_file).write_text(text)
results["expected"] = expected

from checker.grader.ranks import world_size

# a data-parallel chapter's job takes world_size GPUs (chapter.toml): a worker holds that many, so "one" is one
# worker on GPUs 0..world-1 and "two" two workers on 2*world GPUs; `check` sees the first world GPUs
world = world_size(chapter.config(device))
if stage == "check":  # every student with `workbook check` on GPU 0, one at a time: what grading must agree with
    checked = results.setdefault("checks", {})
    for student in sorted(expected):
        if student in checked:
            continue  # a cut call's students are not checked again
        started = time.monotonic()
        proc = subprocess.run([sys.executable, "-m", "checker", "check", chapter.id, "--submission",
                               str(submissions / student), "--device", device, "--json"], capture_output=True,
                              text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(map(str, range(world)))))
        try:
            failed = [c["name"] for c in json.loads(proc.stdout)["checks"] if c["status"] == "failed"]
        except (ValueError, KeyError, TypeError):
            failed = None
        checked[student] = {"verdict": {0: "passed", 1: "failed"}.get(proc.returncode, "error"),
                            "exit_code": proc.returncode, "wall_s": round(time.monotonic() - started, 1),
                            "failed_checks": failed, "stderr_tail": proc.stderr[-600:]}
        print(f"check {student}: {checked[student]['verdict']} ({checked[student]['wall_s']:.0f} s)", flush=True)
        results_path.write_text(json.dumps(results, indent=2) + "\n")

stages = {"one": ("one_gpu", ",".join(map(str, range(world)))), "two": ("two_gpus", ",".join(map(str, range(2 * world))))}
if device == "cpu" and stage in ("two", "both"):
    sys.exit("grade_two_gpus.sh: the two-GPU stage needs CUDA; with DEVICE=cpu, run `one` or `check`")
for name in (["one", "two"] if stage == "both" else [stage] if stage in stages else []):
    key, gpus = stages[name]
    grades = work / key
    resumed = (grades / "ledger.jsonl").exists()
    command = [sys.executable, "-m", "checker", "grade", chapter.id, str(submissions), "--out", str(grades),
               "--device", device, *(["--gpus", gpus] if device == "cuda" else [])] + ([] if resumed else ["--force"])
    started = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True)
    wall = time.monotonic() - started
    rows = list(csv.DictReader((grades / "gradebook.csv").open())) if (grades / "gradebook.csv").exists() else []
    results["stages"][key] = {
        "gpus": gpus, "wall_s": round(wall, 1), "exit_code": proc.returncode, "resumed": resumed,
        "summary": (proc.stdout.strip().splitlines() or [""])[-3:],
        "students": {r["student"]: {"verdict": r["verdict"], "wall_s": r["wall_s"], "gpu_name": r["gpu_name"],
                                    "speedup": r["speedup"], "reason": r["reason"]} for r in rows},
        "stderr_tail": proc.stderr[-3000:],
    }
    print(f"{key}: {wall:.0f} s, exit {proc.returncode}", flush=True)
    for kept in ("gradebook.csv", "ledger.jsonl"):
        if (grades / kept).exists():
            shutil.copy(grades / kept, out / f"{key}-{kept}")
    results_path.write_text(json.dumps(results, indent=2) + "\n")  # each stage kept, should the next be cut

one, two = results["stages"].get("one_gpu"), results["stages"].get("two_gpus")
if one and two:
    verdicts = lambda s: {k: v["verdict"] for k, v in s["students"].items()}
    results["same_verdicts"] = verdicts(one) == verdicts(two)
    results["wall_ratio_one_over_two"] = round(one["wall_s"] / two["wall_s"], 2) if two["wall_s"] else None
results_path.write_text(json.dumps(results, indent=2) + "\n")
print(f"wrote {results_path}")
PY
