"""A learner who fixed every lab: is `python3 -m pytest` green, and does `workbook list` show every chapter passed?

    python scripts/learner_loop.py                      # clone into /tmp/workbook-fixed, then everything below
    python scripts/learner_loop.py --clone DIR --logs DIR --out docs/results/learner-loop.md

1. Clones this checkout (its last commit) into --clone and copies each solution's files over the lab files of the
   same name (solutions/<id>/train.py over labs/<id>/train.py), as a learner's fixed labs; nothing is committed.
2. Runs README's test command there: `nice -n 10 python3 -m pytest -q -x -p no:cacheprovider` (about 25 minutes on a
   2-core machine without a GPU).
3. Runs `workbook check NN` of every chapter there, on this machine's device, as the learner would (their progress
   is recorded in the clone's .workbook/), then `workbook list`.
4. Writes --out from the logs: the commands, their exit codes, pytest's summary line and duration, each check's
   verdict, and what `workbook list` printed, with machine, torch version and dates.

Each step writes its log into --logs and is skipped when its log is complete, so a run cut short goes on where it
stopped; --render only rewrites --out from the logs there. Every subprocess runs with PYTHONPATH and WORKBOOK_ROOT
set to the clone, so the clone's own code is what runs.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PYTEST = ["nice", "-n", "10", sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider"]


def now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def env_for(clone: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "WORKBOOK_STATE_DIR"}
    env.update(PYTHONPATH=str(clone), WORKBOOK_ROOT=str(clone))
    return env


def setup(clone: Path, logs: Path) -> None:
    record = logs / "setup.json"
    if record.is_file():
        return
    if clone.exists():
        raise SystemExit(f"learner_loop: {clone} exists but {record} does not: remove it, or name another --clone")
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True,
                            check=True).stdout.strip()
    copied = []
    for lab in sorted((clone / "labs").glob("*/*")):
        solution = clone / "solutions" / lab.relative_to(clone / "labs")
        if lab.is_file() and solution.is_file():
            shutil.copyfile(solution, lab)
            copied.append(f"{solution.relative_to(clone)} -> {lab.relative_to(clone)}")
    record.write_text(json.dumps({"commit": commit, "copied": copied, "date": now(), "machine": machine()}, indent=1))


def logged(command: list[str], clone: Path, log: Path) -> None:
    """Run command in the clone into log, with its start, end and exit code; skipped when log is complete."""
    if log.is_file() and re.search(r"^# exit \d+", log.read_text(), re.M):
        return
    started, t0 = now(), time.monotonic()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    with log.open("w") as out:
        out.write(f"# command: {' '.join(command)}\n# cwd: {clone}\n# commit: {commit}\n# started: {started}\n")
        out.flush()
        code = subprocess.call(command, cwd=clone, env=env_for(clone), stdout=out, stderr=subprocess.STDOUT)
        out.write(f"# ended: {now()}\n# wall: {time.monotonic() - t0:.0f} s\n# exit {code}\n")


def header(log: Path, key: str) -> str:
    found = re.search(rf"^# {key}:? (.*)$", log.read_text(), re.M) if log.is_file() else None
    return found.group(1).strip() if found else "?"


def commit_of(log: Path, setup_record: dict) -> str:
    """The clone's commit when the log was made (the commit it was cloned at, for a log that names none)."""
    found = header(log, "commit")
    return (found if found != "?" else setup_record["commit"])[:10]


def body(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if not line.startswith("# ")] if log.is_file() else []


def machine() -> str:
    import torch

    cuda = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"{platform.system()} {platform.machine()}, {os.cpu_count()} cores, {cuda}; Python "
            f"{platform.python_version()}, torch {torch.__version__}")


def render(clone: Path, logs: Path, chapters: list) -> str:
    setup_record = json.loads((logs / "setup.json").read_text())
    pytest_log = logs / "pytest.log"
    summary = next((line.strip("= ") for line in reversed(body(pytest_log))
                    if re.search(r"\d+ (passed|failed|error)", line)), "(no summary line: the run did not finish)")
    lines = [
        "# The learner's loop: every lab fixed",
        "",
        f"Written by `scripts/learner_loop.py` from its logs. Machine: {setup_record.get('machine') or machine()}. "
        f"A clone of commit "
        f"`{setup_record['commit'][:10]}` made {setup_record['date']}, with the solutions copied over the labs:",
        "",
        *[f"- `{c}`" for c in setup_record["copied"]],
        "",
        "## `python3 -m pytest` with every lab fixed",
        "",
        f"`{header(pytest_log, 'command').replace(sys.executable, 'python3')}` in the clone at `{commit_of(pytest_log, setup_record)}`, from {header(pytest_log, 'started')} to "
        f"{header(pytest_log, 'ended')} ({header(pytest_log, 'wall')}), exit {header(pytest_log, 'exit')}; "
        f"pytest's summary line:",
        "",
        "```text",
        summary,
        "```",
    ]
    failures = [line for line in body(pytest_log) if line.startswith(("FAILED", "ERROR"))]
    if failures:
        lines += ["", "Failed:", "", "```text", *failures, "```"]
    lines += ["", "## `workbook check NN` of every chapter, then `workbook list`", "",
              "| chapter | command | commit | started | exit | wall | verdict |", "|---|---|---|---|---|---|---|"]
    for chapter in chapters:
        log = logs / f"check-{chapter.id}.log"
        verdict = next((line.split(",")[0].split(":")[0].strip() for line in reversed(body(log))
                        if re.match(r"(PASSED|FAILED|workbook:)", line)), "?")
        checks = re.findall(r"^\s*\[(PASS|FAIL|SKIP)\]\s+(\S+)", "\n".join(body(log)), re.M)
        if checks:
            verdict += " (" + ", ".join(f"{name} {status.lower()}" for status, name in checks) + ")"
        lines.append(f"| {chapter.id} | `{header(log, 'command').replace(sys.executable, 'python3')}` | "
                     f"`{commit_of(log, setup_record)}` | {header(log, 'started')} | {header(log, 'exit')} | "
                     f"{header(log, 'wall')} | {verdict} |")
    list_log = logs / "list.log"
    lines += ["", f"`workbook list` in the clone at `{commit_of(list_log, setup_record)}`, "
              f"{header(list_log, 'started')}:", "", "```text",
              *body(list_log), "```", ""]
    for chapter in chapters:
        log = logs / f"check-{chapter.id}.log"
        lines += [f"<details><summary><code>workbook check {chapter.id[:2]}</code>: what it printed</summary>", "",
                  "```text", *body(log), "```", "", "</details>", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--clone", type=Path, default=Path("/tmp/workbook-fixed"), help="where to clone (default %(default)s)")
    p.add_argument("--logs", type=Path, help="where the logs go (default: CLONE-logs)")
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "learner-loop.md",
                   help="the results file to write (default docs/results/learner-loop.md)")
    p.add_argument("--render", action="store_true", help="only rewrite --out from the logs already there")
    args = p.parse_args(argv)
    clone = args.clone.resolve()
    logs = (args.logs or Path(f"{clone}-logs")).resolve()
    logs.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("WORKBOOK_ROOT", str(ROOT))
    from checker.base.chapters import all_chapters

    chapters = all_chapters()
    if not args.render:
        setup(clone, logs)
        logged(PYTEST, clone, logs / "pytest.log")
        for chapter in chapters:
            logged([sys.executable, "-m", "checker", "check", chapter.id[:2]], clone, logs / f"check-{chapter.id}.log")
        (logs / "list.log").unlink(missing_ok=True)
        logged([sys.executable, "-m", "checker", "list"], clone, logs / "list.log")
    if not (logs / "setup.json").is_file():
        print(f"learner_loop: {logs} holds no logs of a run (no setup.json); run without --render first", file=sys.stderr)
        return 2
    args.out.write_text(render(clone, logs, chapters))
    print(f"learner_loop: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
