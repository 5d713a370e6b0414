import atexit
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("WORKBOOK_ROOT", str(ROOT))
# The tests' own checks must never touch the learner's progress (.workbook/progress.json): they get a state
# folder of their own, which subprocesses inherit.
_STATE = tempfile.mkdtemp(prefix="workbook-test-state-")
os.environ["WORKBOOK_STATE_DIR"] = _STATE
atexit.register(shutil.rmtree, _STATE, ignore_errors=True)


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU; this machine has none")


@pytest.fixture
def workbook():
    """Run the `workbook` CLI in a subprocess, as a user would; returns the CompletedProcess."""
    import subprocess

    def run(*args, timeout=600):
        return subprocess.run([sys.executable, "-m", "checker", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)

    return run


@pytest.fixture(scope="session")
def pristine_lab(tmp_path_factory):
    """A submission folder holding a chapter's lab as shipped, never the learner's edited copy in labs/
    (checker.grader.pristine finds it): the tests grade the workbook, not the learner's progress."""
    from checker.base.chapters import get_chapter
    from checker.grader.pristine import write_pristine_lab

    made = {}

    def folder(chapter_id: str) -> Path:
        chapter = get_chapter(chapter_id)
        if chapter.id not in made:
            made[chapter.id] = write_pristine_lab(chapter, tmp_path_factory.mktemp(f"pristine-{chapter.id}"))[0].parent
        return made[chapter.id]

    return folder


def code_line_of(text: str, needle: str) -> int:
    """The number of the first line of a script holding ``needle`` in its code: docstrings and comment lines are
    passed over (the slow script, which stands in for a lab where git holds no shipped copy, names its syncs in
    its docstring)."""
    import ast

    lines = text.splitlines()
    skipped = {n for n, line in enumerate(lines, 1) if line.lstrip().startswith("#")}
    for node in ast.walk(ast.parse(text)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            skipped.update(range(body[0].lineno, body[0].end_lineno + 1))
    return next(n for n, line in enumerate(lines, 1) if n not in skipped and needle in line)


_GRADED = {}


@pytest.fixture(scope="session")
def graded(pristine_lab):
    """`workbook check` of a chapter's variant on the CPU, made once per test session and shared. The "lab"
    variant is the lab as shipped (see pristine_lab), so a learner's fixed labs leave the tests green."""
    from checker.base.chapters import get_chapter
    from checker.grader.evaluate import evaluate

    def grade(chapter_id: str, variant: str):
        chapter = get_chapter(chapter_id)
        key = (chapter.id, variant)
        if key not in _GRADED:
            if variant == "lab":
                _GRADED[key] = evaluate(chapter, submission=pristine_lab(chapter.id), device="cpu")
            else:
                _GRADED[key] = evaluate(chapter, variant=variant, device="cpu")
        return _GRADED[key]

    return grade


@pytest.fixture
def fake_ncu(tmp_path, monkeypatch):
    """Install a stand-in for ncu and for the grader's ncu run. ``install(csv_text, copy_bandwidth)`` returns
    ``(calls, grade)``: ``calls`` is a file holding one JSON list of arguments per call (the profiling run's
    ncu options as the grader's runner got them, then each `ncu --import`); ``grade(trace)`` runs the grader's
    ncu step (checker.grader.ncu) on that trace's target and the ncu_dram check on the evidence, with a
    stand-in runner in place of a GPU run and ``copy_bandwidth`` bytes/s in place of the CUDA probe."""
    from checker.base.chapters import get_chapter
    from checker.checks import ncu_dram
    from checker.checks.evidence import Evidence
    from checker.grader import ncu as grader_ncu

    def install(csv_text: str, copy_bandwidth: float):
        calls = tmp_path / "calls.jsonl"
        (tmp_path / "bin").mkdir(exist_ok=True)
        fake = tmp_path / "bin" / "ncu"
        fake.write_text(
            f"#!{sys.executable}\n"
            "import json, sys\n"
            f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
            f"sys.stdout.write({csv_text!r})\n"
        )
        fake.chmod(0o755)
        monkeypatch.setenv("WORKBOOK_NCU", str(fake))
        monkeypatch.delenv("WORKBOOK_NCU_OUT", raising=False)
        monkeypatch.setattr(grader_ncu, "copy_bandwidth_in_subprocess", lambda: copy_bandwidth)
        chapter = get_chapter("05")
        spec = chapter.check("ncu_dram")
        cfg = chapter.config("cuda")

        class StandIn:
            """The grader's side of the ncu run: what it asked the runner for, and a report where ncu writes it."""

            candidate = chapter.solution_script

            def __init__(self):
                self.chapter = chapter

            def say(self, line):
                pass

            def run(self, script, what, secret, steps=None, profiler=None):
                _name, _tool, options = profiler
                with calls.open("a") as out:
                    out.write(json.dumps([*options, "--steps", str(steps)]) + "\n")
                report = tmp_path / "profile.ncu-rep"
                report.write_text("report")
                return SimpleNamespace(output_tail="", trace_file=report)

        def grade(trace):
            target = ncu_dram.ncu_target(trace, spec, cfg)
            outcome = grader_ncu.profile_kernel(StandIn(), target)
            evidence = Evidence(chapter=chapter, device="cuda", trace_tool="torch", candidate=chapter.solution_script,
                                cfg=cfg, traced=(None, None), traces={"candidate": trace},
                                ncu={"ncu_dram": outcome})
            return ncu_dram.ncu_dram(evidence, spec)

        return calls, grade

    return install
