"""Who gets which mystery jobs (chapter 08): an assignment drawn from a secret the grader holds.

A chapter that grades a diagnosis declares its jobs (chapter.toml ``jobs = ["a", "b", "c"]``) and an answer
file. Each learner's assignment is drawn from HMAC-SHA256(secret, chapter id + learner id):

* the walls are dealt to the jobs in a shuffled order, one of each design (data, overhead, kernel) before any
  repeats, so every learner has one job of each kind, in an order of their own;
* each job gets a code: an integer the chapter's workload turns into sizes (``workload.job_settings``), drawn
  until its sizes are of the job's design, so two learners' jobs differ in their numbers too.

The secret is the course's (``WORKBOOK_COURSE_SECRET``, set by the instructor where the class is graded) or,
without it, the public practice secret: self-study needs no secret, and its assignments are reproducible by
anyone. The grader recomputes the assignment from the secret and the learner id every time; the assignment file
a learner holds (labs/<id>/assignment.toml) is only what lets them run their jobs, never what the grader
believes.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import random
import sys
from dataclasses import dataclass, field
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from checker.base.chapters import Chapter
from checker.base.errors import WorkbookError

SECRET_ENV = "WORKBOOK_COURSE_SECRET"
PRACTICE_SECRET = "workbook-practice-08"  # public on purpose: self-study assignments anyone can recompute
PRACTICE_LEARNER = "practice"
ASSIGNMENT_FILE = "assignment.toml"
ANSWER_CAP = 64 * 1024  # bytes of an answer file the grader reads


@dataclass(frozen=True)
class Assignment:
    chapter: str
    learner: str
    secret_kind: str                  # "course" (WORKBOOK_COURSE_SECRET) or "practice"
    codes: dict[str, int] = field(default_factory=dict)    # job -> code
    designs: dict[str, str] = field(default_factory=dict)  # job -> the wall its sizes were drawn for

    def to_toml(self) -> str:
        lines = [f"# Your mystery jobs for chapter {self.chapter}, written by `workbook assign {self.chapter[:2]}`.",
                 "# Run one with `python labs/08_triage/train.py --job a` (or the slow script, or `workbook profile 08`).",
                 "# The grader draws these again from its own secret: editing this file changes nothing it measures.",
                 f'learner = "{self.learner}"', "", "[jobs]"]
        lines += [f"{job} = {code}" for job, code in self.codes.items()]
        return "\n".join(lines) + "\n"


def secret() -> tuple[str, str]:
    """(the secret, its kind): the course's when WORKBOOK_COURSE_SECRET is set, else the practice secret."""
    value = os.environ.get(SECRET_ENV, "")
    return (value, "course") if value else (PRACTICE_SECRET, "practice")


def draw(chapter: Chapter, learner: str, key: str | None = None, kind: str | None = None) -> Assignment:
    """The learner's assignment under ``key`` (default: secret())."""
    from checker.base.workloads import load_workload_module

    if key is None:
        key, kind = secret()
    jobs = list(chapter.raw.get("jobs", []))
    if not jobs:
        raise WorkbookError(f"{chapter.id}/chapter.toml declares no jobs: it grades no diagnosis")
    workload = load_workload_module(chapter.dir)
    digest = hmac.new(key.encode(), f"{chapter.id}/{learner}".encode(), hashlib.sha256).digest()
    rng = random.Random(int.from_bytes(digest, "big"))
    walls: list[str] = []
    while len(walls) < len(jobs):
        deal = list(workload.DESIGNS)
        rng.shuffle(deal)
        walls += deal
    codes, designs = {}, {}
    for job, wall in zip(jobs, walls):
        while True:
            code = rng.randrange(10**6, 10**7)
            if workload.job_settings(code, "cpu")["design"] == wall:
                break
        codes[job], designs[job] = code, wall
    return Assignment(chapter.id, learner, kind or "course", codes, designs)


def read_toml(path: Path, what: str) -> dict:
    """A small TOML file the learner wrote, as data; a WorkbookError saying what is wrong with it."""
    try:
        data = path.read_bytes()
    except OSError as err:
        raise WorkbookError(f"{what} {path}: cannot read it ({err.strerror or err})") from None
    if len(data) > ANSWER_CAP:
        raise WorkbookError(f"{what} {path}: {len(data)} bytes, more than the {ANSWER_CAP} the grader reads")
    try:
        return tomllib.loads(data.decode("utf-8", errors="replace"))
    except tomllib.TOMLDecodeError as err:
        raise WorkbookError(f"{what} {path}: not valid TOML ({err})") from None


def learner_of(folder: Path, fallback: Path | None) -> str:
    """The learner id a self-checked answer is graded as: the ``learner`` of the assignment file beside it (or
    the lab's), else the practice learner. In class grading the grader names the learner itself."""
    for place in (folder, fallback):
        if place is None or not (place / ASSIGNMENT_FILE).is_file():
            continue
        learner = read_toml(place / ASSIGNMENT_FILE, "the assignment").get("learner")
        if isinstance(learner, str) and learner.strip():
            return learner.strip()
    return PRACTICE_LEARNER
