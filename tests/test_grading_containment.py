"""Submissions that misbehave, graded through `workbook grade` as a class: each is contained, each gets its
reason, and nobody else's files are touched. Parts of this rest on the per-run sandbox (checker/sandbox.py:
an output cap, a memory cap, "left a process running"); what only an unprivileged user prevents is tested
where the grader can drop to one."""

import os
import re
import subprocess
import sys
import uuid

import pytest

from gradinglib import GOOD, grade_command, grade_env, make_class, make_tiny_root, read_gradebook, tree_state

pytestmark = pytest.mark.slow
def _unprivileged_runs() -> str | None:
    from checker.grader.sandbox import isolation

    identity, said = isolation()
    return None if identity is not None else said


# what only a grader that can drop to an unprivileged user prevents (rather than detects)
UNPRIVILEGED = pytest.mark.skipif(_unprivileged_runs() is not None,
                                  reason=f"needs runs as an unprivileged user; here each run {_unprivileged_runs()}")
ORPHAN_TAG = f"grading-test-orphan-{uuid.uuid4().hex[:8]}"
RUN_TIMEOUT_S = "30"  # WORKBOOK_TIMEOUT_S: a run's limit, so that a hang costs seconds here

# writes outside its own folder by relative paths: into a neighbour's folder, the output folder, its own copy
WRITER = '''
from pathlib import Path
here = Path(__file__).resolve().parent
for target in (here.parent / "honest" / "train.py", here.parent / "honest" / "pwned.txt",
               here.parent.parent / "grades" / "gradebook.csv", here.parent / "grades" / "feedback" / "honest.md",
               here / "note.txt"):
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a") as handle:
            handle.write("pwned\\n")
    except OSError:
        pass
''' + GOOD

# leaves a grandchild running in a session of its own, holding the run's output pipe
FORKER = f'''
import os, sys
first = os.fork()
if first == 0:
    os.setsid()
    if os.fork() == 0:
        os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(3600)", "{ORPHAN_TAG}"])
    os._exit(0)
os.waitpid(first, 0)
''' + GOOD

PRINTER = '''
import sys
chunk = "x" * (1 << 20) + "\\n"
for _ in range(200):  # 200 MB
    sys.stdout.write(chunk)
sys.stdout.flush()
''' + GOOD

# allocates and touches memory until half of what is available, at most 3 GB (a bound only so that a grader
# without a memory cap does not take the machine down), then trains honestly
HOG = '''
avail = int(next(l for l in open("/proc/meminfo") if l.startswith("MemAvailable")).split()[1]) * 1024
blocks, held = [], 0
while held < min(avail // 2, 3 << 30):
    blocks.append(bytearray(b"\\x01") * (64 << 20))
    held += 64 << 20
''' + GOOD

SLEEPER = '''
import time
while True:
    time.sleep(1)
'''

# the grader's peak memory: VmHWM (getrusage's ru_maxrss would carry pytest's own peak across fork and exec)
MAXRSS_WRAPPER = ("import sys\nfrom checker.cli import main\ncode = main(sys.argv[1:])\n"
                  "peak = open('/proc/self/status').read().split('VmHWM:')[1].split()[0]\n"
                  "print('grader-maxrss-kb', peak, file=sys.stderr)\nsys.exit(code)\n")


def _alive_with_tag(tag: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and entry != str(os.getpid()):
            try:
                if tag.encode() in open(f"/proc/{entry}/cmdline", "rb").read():
                    state = open(f"/proc/{entry}/stat").read().rsplit(")", 1)[1].split()[0]
                    if state != "Z":
                        found.append(int(entry))
            except OSError:
                pass
    return found


@pytest.fixture(scope="module")
def graded_class(tmp_path_factory):
    base = tmp_path_factory.mktemp("contained")
    root = make_tiny_root(base)
    submissions = make_class(base / "class", {"honest": GOOD, "writer": WRITER, "forker": FORKER,
                                              "printer": PRINTER, "hog": HOG, "sleeper": SLEEPER})
    before = tree_state(submissions)
    checkout_before = tree_state(root / "chapters")
    out = base / "grades"
    command = [sys.executable, "-c", MAXRSS_WRAPPER, *grade_command("90", submissions, out)[3:],
               "--device", "cpu", "--workers", "2"]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=900,
                          # the scan would refuse the forker before it runs; containment must hold without it
                          env=grade_env(root, WORKBOOK_TIMEOUT_S=RUN_TIMEOUT_S, WORKBOOK_SCAN="0"))
    survivors = _alive_with_tag(ORPHAN_TAG)
    for pid in survivors:  # never leave one behind, even when the test fails
        os.kill(pid, 9)
    rows = {row["student"]: row for row in read_gradebook(out / "gradebook.csv")}
    maxrss = re.search(r"grader-maxrss-kb (\d+)", proc.stderr)
    return dict(proc=proc, rows=rows, submissions=submissions, before=before, out=out, root=root,
                checkout_before=checkout_before, survivors=survivors, maxrss_kb=int(maxrss.group(1)) if maxrss else None)


def test_the_honest_neighbour_is_graded_as_if_alone(graded_class):
    assert graded_class["proc"].returncode in (0, 3), graded_class["proc"].stderr
    assert graded_class["rows"]["honest"]["verdict"] == "passed"
    assert len(graded_class["rows"]) == 6


def test_no_submission_folder_is_written_to(graded_class):
    submissions = graded_class["submissions"]
    assert tree_state(submissions) == graded_class["before"]
    assert not list(submissions.rglob("__pycache__")) and not list(submissions.rglob("*.pyc"))
    assert tree_state(graded_class["root"] / "chapters") == graded_class["checkout_before"]


def test_relative_writes_outside_its_folder_reach_nobody(graded_class):
    out = graded_class["out"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()) == sorted(
        ["gradebook.csv", "ledger.jsonl", *(f"feedback/{name}.md" for name in graded_class["rows"])])
    assert "pwned" not in (out / "gradebook.csv").read_text()
    assert "pwned" not in (out / "feedback" / "honest.md").read_text()


def test_a_forked_child_does_not_outlive_grading(graded_class):
    assert graded_class["survivors"] == [], "a process the submission forked is still running"


def test_200_mb_of_output_leaves_the_graders_memory_flat(graded_class):
    assert graded_class["maxrss_kb"] is not None, graded_class["proc"].stderr[-2000:]
    assert graded_class["maxrss_kb"] < 150 * 1024, f"the grader grew to {graded_class['maxrss_kb']} kB"


def test_a_hang_is_stopped_with_its_reason(graded_class):
    row = graded_class["rows"]["sleeper"]
    assert row["verdict"] == "error" and f"did not finish within {RUN_TIMEOUT_S} s" in row["reason"]


def test_a_forked_child_is_named_in_the_reason(graded_class):
    row = graded_class["rows"]["forker"]
    assert re.search(r"child|process(es)? (left )?running", row["reason"] + row["verdict"]), row


def test_200_mb_of_output_is_capped_with_its_reason(graded_class):
    row = graded_class["rows"]["printer"]
    assert row["verdict"] == "error" and re.search(r"output|printed", row["reason"]), row


def test_unbounded_allocation_is_stopped_with_its_reason(graded_class):
    row = graded_class["rows"]["hog"]
    assert row["verdict"] == "error" and re.search(r"memory", row["reason"], re.I), row


def test_the_per_student_limit_stops_a_whole_grading(tmp_path):
    root = make_tiny_root(tmp_path)
    submissions = make_class(tmp_path / "class", {"sleeper": SLEEPER})
    proc = subprocess.run(grade_command("90", submissions, tmp_path / "grades", "--device", "cpu",
                                        "--student-timeout", "15"),
                          capture_output=True, text=True, timeout=300,
                          env=grade_env(root, WORKBOOK_TIMEOUT_S="600"))
    assert proc.returncode == 3, proc.stderr
    row = read_gradebook(tmp_path / "grades" / "gradebook.csv")[0]
    assert row["verdict"] == "error" and "grading took longer than 15 s" in row["reason"]
    assert 14 <= float(row["wall_s"]) < 60


# absolute paths: where a submission that reads /proc (the grader's command line) finds the real folders
ABSOLUTE_WRITER = '''
import json
from pathlib import Path
from checker.grading.submission import submission_hash
SUBMISSIONS, OUT, ROOT = Path({submissions!r}), Path({out!r}), Path({root!r})
forged = dict(schema=1, student="honest", chapter="90_tiny", submission_sha256=submission_hash(SUBMISSIONS / "honest"),
              device="cpu", trace_tool="torch", verdict="failed", reason="forged", cells={{}}, speedup=None,
              wall_s=0.0, graded_at="", workbook_version="", feedback="forged\\n")
for target, text in ((SUBMISSIONS / "honest" / "pwned.txt", "pwned"), (OUT / "ledger.jsonl", json.dumps(forged)),
                     (OUT / "feedback" / "honest.md", "pwned"), (ROOT / "chapters" / "90_tiny" / "slow.py", "# pwned")):
    try:
        with open(target, "a") as handle:
            handle.write(text + "\\n")
    except OSError:
        pass
'''


@UNPRIVILEGED
def test_absolute_writes_to_other_students_the_output_and_the_checkout_are_refused(tmp_path):
    root = make_tiny_root(tmp_path)
    submissions, out = tmp_path / "class", tmp_path / "grades"
    make_class(submissions, {"honest": GOOD, "writer": ABSOLUTE_WRITER.format(
        submissions=str(submissions), out=str(out), root=str(root)) + GOOD})
    before, checkout = tree_state(submissions), tree_state(root / "chapters")
    proc = subprocess.run(grade_command("90", submissions, out, "--device", "cpu"), capture_output=True, text=True,
                          timeout=600, env=grade_env(root))
    assert proc.returncode == 0, proc.stderr
    assert tree_state(submissions) == before and tree_state(root / "chapters") == checkout
    assert read_gradebook(out / "gradebook.csv")[0]["verdict"] == "passed"
    assert "forged" not in (out / "ledger.jsonl").read_text()
