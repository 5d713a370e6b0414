"""Helpers for the grading tests: a tiny stand-in chapter (seconds per student, not minutes), classes of
submissions, and `workbook grade` run as an instructor runs it (a subprocess, relative paths allowed)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import checker

ROOT = Path(__file__).resolve().parent.parent
TINY = "90_tiny"

TINY_TOML = '''
id = "90_tiny"
title = "A stand-in chapter for the grading tests"
pattern = "none: it exists so that grading a class takes seconds"
lab_file = "train.py"

[workload.cpu]
batch_size = 8
features = 16
dataset_size = 64
steps = 6
warmup = 2
lr = 0.1
trials = 1
timeout_s = 60
memory_mb = 1536

[[checks]]
name = "same_work"
doc = "trains the same model on the same samples and ends at the baseline's loss"
rel_tolerance = 0.05
abs_tolerance = 0.01

[[hints]]
check = "same_work"
nudge = "Your script trains differently from the baseline."
where = "Compare the optimizer's settings with the baseline's."
pattern = "Train on every batch with the baseline's learning rate."
'''

TINY_WORKLOAD = '''
import torch
from torch import nn
from torch.nn import functional as F

from checker.lab import Workload


def build(cfg, device):
    g = torch.Generator().manual_seed(int(cfg.get("seed", 0)))
    n, d = int(cfg["dataset_size"]), int(cfg["features"])
    x, y = torch.randn(n, d, generator=g), torch.randint(0, 4, (n,), generator=g)
    ex, ey = torch.randn(32, d, generator=g), torch.randint(0, 4, (32,), generator=g)
    bs = int(cfg["batch_size"])
    batches = [(x[i:i + bs], y[i:i + bs]) for i in range(0, n, bs)]
    model = nn.Linear(d, 4).to(device)

    def eval_loss(trained):
        return F.cross_entropy(trained(ex.to(device)), ey.to(device)).item()

    return Workload(model=model, loss_fn=F.cross_entropy, eval_loss=eval_loss, batches=batches)
'''

# an honest script: exactly the baseline's work (it passes same_work)
GOOD = '''
import torch
from checker.lab import start

session = start("90_tiny")
optimizer = torch.optim.SGD(session.model.parameters(), lr=session.cfg["lr"])
for step, (x, y) in session.steps(session.batches):
    loss = session.loss_fn(session.model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
session.finish()
'''

# a different learning rate: the loss ends elsewhere (it fails same_work)
WRONG = GOOD.replace('lr=session.cfg["lr"]', 'lr=session.cfg["lr"] * 20')

RAISES = GOOD.replace("session.finish()", 'raise ValueError("shapes do not match")')


def make_tiny_root(base: Path) -> Path:
    """A workbook checkout holding only the stand-in chapter (the code is this checkout's `checker`)."""
    root = base / "tiny-root"
    chapter = root / "chapters" / TINY
    chapter.mkdir(parents=True)
    (chapter / "chapter.toml").write_text(TINY_TOML)
    (chapter / "workload.py").write_text(TINY_WORKLOAD)
    (chapter / "slow.py").write_text(GOOD)
    (root / "labs" / TINY).mkdir(parents=True)
    (root / "labs" / TINY / "train.py").write_text(WRONG)
    (root / "checker").symlink_to(Path(checker.__file__).resolve().parent)
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    reachable_by_runs(root)
    return root


def reachable_by_runs(path: Path) -> None:
    """Let runs dropped to another user (the grader as root) read ``path``: pytest makes its temporary folders
    mode 700, so open each one above it, up to the system's temporary folder, for reading and traversal."""
    top = Path(tempfile.gettempdir()).resolve()
    for folder in [path.resolve(), *path.resolve().parents]:
        if folder == top or top not in folder.parents:
            break
        if folder.stat().st_uid == os.geteuid():
            folder.chmod(folder.stat().st_mode | 0o055)


def make_class(folder: Path, scripts: dict[str, str | None]) -> Path:
    """One folder per student holding train.py (None: a folder with nothing in it)."""
    for name, source in scripts.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        if source is not None:
            (folder / name / "train.py").write_text(textwrap.dedent(source))
    return folder


def grade_env(root: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ, WORKBOOK_ROOT=str(root), **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    return env


def grade_command(chapter: str, submissions, out, *more: str) -> list[str]:
    return [sys.executable, "-m", "checker", "grade", chapter, str(submissions), "--out", str(out), *more]


def run_grade(chapter, submissions, out, *more, root: Path = ROOT, cwd: Path | None = None, timeout=900,
              env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(grade_command(chapter, submissions, out, *more), capture_output=True, text=True,
                          timeout=timeout, cwd=cwd or ROOT, env=env or grade_env(root))


def read_gradebook(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


VERDICT_COLUMNS = ("student", "verdict", "speedup", "reason", "device", "submission_sha256")


def verdict_columns(path: Path, checks: tuple[str, ...] = ("same_work",)) -> list[tuple]:
    """The columns that must not depend on how grading went (not the wall time nor when it was graded). Of a
    check's cell only its status counts: every run trains under a fresh secret, so its number varies a little."""
    return [tuple(row[c] for c in VERDICT_COLUMNS) + tuple(row[c].split(" (")[0] for c in checks)
            for row in read_gradebook(path)]


def tree_state(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its content: to show that nothing there changed."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def recorded_same_work(chapter_id: str, files: list[str]):
    """(variant, same_work's measured) of every check of ``chapter_id`` in these committed GPU rows
    (evidence/history/<file>)."""
    import json

    from checker.base.chapters import get_chapter

    for name in files:
        for line in (ROOT / "evidence" / "history" / name).read_text().splitlines():
            row = json.loads(line)
            if get_chapter(str(row["chapter"])).id != chapter_id:
                continue
            found = next((c for c in row.get("checks", []) if c["name"] == "same_work"), {})
            if found.get("measured"):  # a check cut off, or same_work skipped by --only, measured nothing
                yield row["variant"], found["measured"]


def weights_rejected(distance: float, worst_layer: float, limits: dict) -> bool:
    """Whether same_work's weight rule (checker.checks.same_work) rejects a recorded distance and worst layer."""
    from checker.checks.same_work import _weight_problems

    far = {"relative": distance, "worst_tensor": worst_layer, "worst_tensor_name": "the worst layer", "counts_differ": []}
    return bool(_weight_problems(far, limits, "baseline"))
