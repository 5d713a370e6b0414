"""Who gets which mystery jobs (chapter 08): an assignment drawn from a secret the grader holds.

A chapter that grades a diagnosis declares its jobs (chapter.toml ``jobs = ["a", "b", "c"]``) and an answer
file. Each learner's assignment is drawn from HMAC-SHA256(secret, chapter id + learner id):

* the walls are dealt to the jobs in a shuffled order, one of each design (data, overhead, kernel) before any
  repeats, so every learner has one job of each kind, in an order of their own;
* each job gets a code: an integer the chapter's workload turns into sizes (``workload.job_settings``, sizes
  only), drawn until its sizes are of the job's design, so two learners' jobs differ in their numbers too. The
  design a code was drawn for is the grader's (``DESIGNS``, here): the workload names none.

The secret is the course's (``WORKBOOK_COURSE_SECRET``, set by the instructor where the class is graded) or,
without it, the public practice secret: self-study needs no secret, and its assignments are reproducible by
anyone. The grader recomputes the assignment from the secret and the learner id every time; the assignment file
a learner holds (labs/<id>/assignment.toml) is only what lets them run their jobs, never what the grader
believes.

A learner of a class checks their own work without the course secret. Their assignment file says it came from a
course (``secret = "course"``), so their self-check cannot draw it again: it runs the jobs the file names
(``from_file``), as practice, and its feedback says what is right or wrong without the grader's numbers or
walls, which would be the answer to the graded run. The graded run draws the jobs again from the course secret.
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
from checker.base.paths import display_path
from checker.checks.triage import COURSE_FILE, PRACTICE_LEARNER  # a course file's secret_kind; the public learner

SECRET_ENV = "WORKBOOK_COURSE_SECRET"
PRACTICE_SECRET = "workbook-practice-08"  # public on purpose: self-study assignments anyone can recompute
ASSIGNMENT_FILE = "assignment.toml"
ANSWER_CAP = 64 * 1024  # bytes of an answer file the grader reads
# The wall each of the workload's kinds of job (chapters/08_triage/workload.py RANGES, in order) was made to hit;
# a code's kind is the first draw of its random stream, as job_settings draws it.
DESIGNS = ("data", "overhead", "kernel")


def _design_of(code: int) -> str:
    return DESIGNS[random.Random(int(code)).randrange(len(DESIGNS))]


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
                 "# Grading draws these again from its own secret: editing this file changes nothing a graded run measures.",
                 f'learner = "{self.learner}"', f'secret = "{self.secret_kind}"', "", "[jobs]"]
        lines += [f"{job} = {code}" for job, code in self.codes.items()]
        return "\n".join(lines) + "\n"


def secret() -> tuple[str, str]:
    """(the secret, its kind): the course's when WORKBOOK_COURSE_SECRET is set, else the practice secret."""
    value = os.environ.get(SECRET_ENV, "")
    return (value, "course") if value else (PRACTICE_SECRET, "practice")


def fingerprint() -> str:
    """Which secret a class is graded under, as the ledger keys its records: "practice", or "course:" and a digest
    of the course secret that does not reveal it. A student graded under another secret is graded again."""
    value, kind = secret()
    if kind == "practice":
        return kind
    return "course:" + hmac.new(value.encode(), b"workbook ledger key", hashlib.sha256).hexdigest()[:16]


def draw(chapter: Chapter, learner: str, key: str | None = None, kind: str | None = None) -> Assignment:
    """The learner's assignment under ``key`` (default: secret())."""
    if key is None:
        key, kind = secret()
    jobs = list(chapter.raw.get("jobs", []))
    if not jobs:
        raise WorkbookError(f"{chapter.id}/chapter.toml declares no jobs: it grades no diagnosis")
    digest = hmac.new(key.encode(), f"{chapter.id}/{learner}".encode(), hashlib.sha256).digest()
    rng = random.Random(int.from_bytes(digest, "big"))
    walls: list[str] = []
    while len(walls) < len(jobs):
        deal = list(DESIGNS)
        rng.shuffle(deal)
        walls += deal
    codes, designs = {}, {}
    for job, wall in zip(jobs, walls):
        while True:
            code = rng.randrange(10**6, 10**7)
            if _design_of(code) == wall:
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


def from_file(chapter: Chapter, folder: Path, fallback: Path | None) -> Assignment | None:
    """A self-check's assignment when the learner's file came from a course whose secret this machine lacks: the
    jobs the file names, run as given (None when the file is not a course's, or the course secret is here)."""
    if secret()[1] == "course":
        return None
    for place in (folder, fallback):
        if place is None or not (place / ASSIGNMENT_FILE).is_file():
            continue
        data = read_toml(place / ASSIGNMENT_FILE, "the assignment")
        if data.get("secret") != "course":
            return None
        jobs = data.get("jobs") if isinstance(data.get("jobs"), dict) else {}
        wanted = list(chapter.raw.get("jobs", []))
        codes = {job: jobs.get(job) for job in wanted}
        if any(isinstance(c, bool) or not isinstance(c, int) or not 10**6 <= c < 10**7 for c in codes.values()):
            raise WorkbookError(f"the assignment {place / ASSIGNMENT_FILE}: [jobs] must give {', '.join(wanted)} "
                                "a code each, as your instructor's file did")
        designs = {job: "" for job in codes}  # a course's draw is not this machine's to know: the file gives codes only
        learner = str(data.get("learner") or PRACTICE_LEARNER).strip() or PRACTICE_LEARNER
        return Assignment(chapter.id, learner, COURSE_FILE, codes, designs)
    return None


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


def answer_path(folder: Path, name: str, device: str) -> Path:
    """The answer file the grader reads: ``answer.<device>.toml`` where one is beside the lab (a diagnosis kept per
    device: the reference solution has one per device, since shares measured on a CPU are not a GPU's), else
    ``answer.toml``."""
    plain = folder / name
    own = plain.with_name(f"{plain.stem}.{device}{plain.suffix}")
    return own if own.is_file() else plain


@dataclass
class Drawn:
    """A diagnosis chapter's part of one check: the learner's jobs, the answer handed in (read as data), the traces
    it names, and the job the candidate's fix is run as (both runs of each pair get ``pair_args``)."""

    assignment: Assignment
    answer: dict | None
    answer_problem: str | None
    shown: dict
    fix_job: str
    notes: list[str]

    @property
    def pair_args(self) -> list[str]:
        return ["--set", f"job={self.assignment.codes[self.fix_job]}"]

    @property
    def pair_cfg(self) -> dict:
        return {"job": self.assignment.codes[self.fix_job]}


def draw_for(chapter: Chapter, candidate: Path, device: str, learner: str | None) -> Drawn:
    """The learner's jobs from the grader's secret; the answer file beside ``candidate``, read as data; the job the
    candidate's fix is run as (the answer's [fix] job, else the first job). ``learner``: class grading's (the
    submission folder's name); None for a learner checking their own work, whose assignment file names them."""
    from checker.grader.shown_work import read_shown

    folder = candidate.parent
    own = None
    notes: list[str] = []
    self_check = learner is None
    if self_check:  # a learner checking their own work: the learner id of their assignment file
        own = from_file(chapter, folder, chapter.lab_script.parent)
        learner = own.learner if own else learner_of(folder, chapter.lab_script.parent)
    else:  # class grading: the learner is the submission folder's name
        notes += _other_learner(folder, learner)
    assignment = own or draw(chapter, learner)
    path = answer_path(folder, str(chapter.raw["answer_file"]), device)
    answer, problem = None, None
    if not path.is_file():
        problem = f"no answer file: {display_path(path)} is missing"
    else:  # an answer that is not TOML is bad input: refused here, in one line, before any run (exit 2)
        answer = read_toml(path, "the answer")
    shown = read_shown(answer, path.parent, assignment.codes)  # the traces it names, read as data
    fix = (answer or {}).get("fix")
    wanted = fix.get("job") if isinstance(fix, dict) else None
    fix_job = wanted if wanted in assignment.codes else list(assignment.codes)[0]
    if own is not None:
        notes.append(f"assignment: learner {learner!r}, the jobs of your course's assignment file run as given "
                     "(a self-check: your instructor's grading draws them again from the course secret, and "
                     f"this feedback leaves out the grader's numbers); the fix runs as job {fix_job}")
    else:
        notes.append(f"assignment: learner {learner!r}, drawn from the {assignment.secret_kind} secret"
                     + (" (set WORKBOOK_COURSE_SECRET to grade a class)"  # class grading chose --practice
                        if assignment.secret_kind == "practice" and self_check else "")
                     + f"; the fix runs as job {fix_job}")
    return Drawn(assignment, answer, problem, shown, fix_job, notes)


def _other_learner(folder: Path, learner: str) -> list[str]:
    """In class grading the learner is the submission folder's name: say so when the assignment file handed in
    names someone else (an exported folder like alice_smith_1234 would be graded against other jobs)."""
    handed = folder / ASSIGNMENT_FILE
    if not handed.is_file():
        return []
    try:
        named = str(read_toml(handed, "the assignment").get("learner") or "").strip()
    except WorkbookError:
        return []
    if not named or named == learner:
        return []
    return [f"the {ASSIGNMENT_FILE} handed in names learner {named!r}, but this submission is graded as learner "
            f"{learner!r} (its folder's name), whose jobs differ: if it is {named!r}'s, rename the folder to "
            f"{named!r} and grade it again"]
