"""A run leaves nothing behind for the next one (checker/grader/sandbox.py): where the kernel allows a mount
namespace, each run has its own empty /dev/shm, /tmp, /var/tmp and /run/lock, whether it is forked from the fork
server or started afresh; where it does not (simulated with WORKBOOK_PRIVATE_SCRATCH=0), what a run left there is
found, removed, and the run refused. The same holds for a System V semaphore set: where namespaces are allowed the
run has its own IPC namespace, where not the set is found by its key, removed, and the run refused."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pytest

from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from checker.grader import sandbox
from checker.grader.runs import run_script

ROOT = Path(__file__).resolve().parent.parent
PROBE = ROOT / "tests" / "data" / "scratch" / "leave_behind.py"
MARKS = [Path("/dev/shm/workbook-scratch-probe"), Path("/tmp/workbook-scratch-probe")]
IPC_KEY = 0x57425343  # tests/data/scratch/leave_behind.py's semaphore set
pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="needs Linux's /dev/shm")


def probe_sets() -> list[tuple[str, int]]:
    """The probe's semaphore sets on this machine's IPC namespace, whoever made them."""
    sets = []
    for line in Path("/proc/sysvipc/sem").read_text().splitlines()[1:]:
        key, semid = line.split()[:2]
        if int(key) == IPC_KEY:
            sets.append(("sem", int(semid)))
    return sets


@pytest.fixture
def clean_marks():
    for mark in MARKS:
        mark.unlink(missing_ok=True)
    sandbox.remove_ipc(probe_sets())
    yield
    for mark in MARKS:
        mark.unlink(missing_ok=True)
    sandbox.remove_ipc(probe_sets())


def run_probe():
    return run_script(get_chapter("00"), PROBE, "cpu", steps=6, seed=5)


@pytest.mark.slow
@pytest.mark.parametrize("forked", ["1", "0"], ids=["forked", "afresh"])
def test_a_run_finds_nothing_an_earlier_run_left_in_scratch_places(clean_marks, monkeypatch, forked):
    if not sandbox.scratch_isolation_available():
        pytest.skip("this machine allows no mount namespace (needs root and a kernel that allows it)")
    monkeypatch.setenv("WORKBOOK_FORKSERVER", forked)
    libraries = Path(tempfile.mkdtemp(prefix="workbook-libs-", dir="/tmp"))  # nsys's libdw, unpacked in /tmp
    libraries.chmod(0o755)
    monkeypatch.setenv("LD_LIBRARY_PATH", f"{libraries}{os.pathsep}{os.environ.get('LD_LIBRARY_PATH', '')}")
    try:
        first, second = run_probe(), run_probe()
    finally:
        libraries.rmdir()
    assert first.reports["found"] == 0 and second.reports["found"] == 0
    assert not any(mark.exists() for mark in MARKS), "a run's private /dev/shm or /tmp reached the machine's"
    assert first.reports["ipc_found"] == 0 and second.reports["ipc_found"] == 0, "a semaphore set outlived its run"
    assert not probe_sets(), "a run's semaphore set reached the machine's IPC namespace"
    assert first.reports["libraries"] == 1, "a folder LD_LIBRARY_PATH names under /tmp is not bound back into the run"


@pytest.mark.slow
def test_without_namespaces_what_a_run_left_is_found_removed_and_refused(clean_marks, monkeypatch):
    monkeypatch.setenv("WORKBOOK_PRIVATE_SCRATCH", "0")
    with pytest.raises(WorkbookError, match=r"left files outside its run folder \(.*workbook-scratch-probe.*"
                                            r"System V semaphore set \(key 0x57425343\)"):
        run_probe()
    assert not any(mark.exists() for mark in MARKS), "what the refused run left is still there for the next one"
    assert not probe_sets(), "the refused run's semaphore set is still there for the next one"


def test_ipc_objects_finds_the_users_semaphore_sets_and_removes_them():
    import ctypes

    libc = ctypes.CDLL(None)
    key = 0x57425300 + os.getpid() % 256
    semid = libc.semget(key, 1, 0o1000 | 0o600)
    assert semid >= 0
    try:
        mine = sandbox.ipc_objects(os.geteuid())
        assert mine.get(("sem", semid)) == f"a System V semaphore set (key {key:#x})"
        assert ("sem", semid) not in sandbox.ipc_objects(os.geteuid() + 1)  # another user's run
        sandbox.remove_ipc([("sem", semid)])
        assert ("sem", semid) not in sandbox.ipc_objects(os.geteuid())
    finally:
        libc.semctl(semid, 0, sandbox.IPC_RMID)


def test_left_outside_finds_the_run_users_new_files_only(tmp_path):
    uid = os.geteuid()
    before = Path("/dev/shm") / f"workbook-left-old-{os.getpid()}"
    before.write_text("made before the run")
    since = time.time_ns()
    time.sleep(0.01)
    new = Path("/dev/shm") / f"workbook-left-new-{os.getpid()}"
    excluded = Path("/dev/shm") / f"workbook-left-mine-{os.getpid()}"
    try:
        new.write_text("left by the run")
        excluded.mkdir()
        (excluded / "inside").write_text("the run's own folder")
        found = sandbox.left_outside(since, uid, [excluded], limit=1000)
        assert str(new) in found
        assert str(before) not in found and not any(f.startswith(str(excluded)) for f in found)
        assert str(new) not in sandbox.left_outside(since, uid + 1, [excluded], limit=1000)  # another user's run
        sandbox.remove_left([str(new), str(excluded)])
        assert not new.exists() and not excluded.exists()
    finally:
        for path in (before, new):
            path.unlink(missing_ok=True)
        if excluded.exists():
            sandbox.remove_left([str(excluded)])
