"""A check stopped by `kill` ends its runs with it, as Ctrl-C does.

A run's processes are a group of their own under another user: before session 73, SIGTERM ended `workbook check` at
once, and a run it had started (a loader worker spinning in a red-team submission) went on using a core for minutes.
"""

from __future__ import annotations

import os
import pwd
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from checker.base.paths import repo_root

def _free_uid() -> int:
    uid = 61_000 + os.getpid() % 2_000
    while True:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
        uid += 1


def _processes_of(uid: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid == uid:
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def _dying(pid: int) -> bool | None:
    """Whether a process is on its way out: exited and waiting to be reaped (state Z), exiting (PF_EXITING), or with
    a SIGKILL pending; None where it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, IndexError):
        return None
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return fields[0] == "Z" or bool(int(fields[6]) & 0x4) or bool(pending & (1 << (signal.SIGKILL - 1)))


def _still_running(uid: int, grace_s: float = 3.0) -> list[int]:
    """The processes of ``uid`` neither gone nor dying ``grace_s`` after the check ended (at once where none is left).
    A run the grader killed may take a moment to die on a loaded machine (CI once saw one still there 1 s after the
    check ended, while a red-team helper and this suite shared two cores); one the kill never reached is alive and
    unmarked, and a run has seconds of work left when the stop comes, so it does not end by itself in the grace.
    Whatever is left is killed, so the machine stays clean either way."""
    deadline = time.monotonic() + grace_s
    while True:
        alive = [pid for pid in _processes_of(uid) if _dying(pid) is False]
        if not alive or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    for pid in _processes_of(uid):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return alive


@pytest.mark.skipif(os.geteuid() != 0, reason="runs drop to a user of their own only where the grader runs as root")
def test_a_check_stopped_by_sigterm_leaves_no_run_behind(tmp_path):
    uid = _free_uid()
    submission = tmp_path / "hang"
    submission.mkdir()
    lab = repo_root() / "labs" / "01_item_syncs" / "train.py"
    (submission / "train.py").write_text(lab.read_text())
    env = {**os.environ, "WORKBOOK_RUN_UID": str(uid), "WORKBOOK_ROOT": str(repo_root())}
    check = subprocess.Popen([sys.executable, "-m", "checker", "check", "01", "--submission", str(submission),
                              "--device", "cpu"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             cwd=repo_root())
    deadline = time.monotonic() + 120
    while not _processes_of(uid) and check.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert check.poll() is None, f"the check ended before any run started: {check.stderr.read()[-300:]!r}"
    assert _processes_of(uid), "no run started within 120 s"
    check.send_signal(signal.SIGTERM)
    code = check.wait(timeout=60)
    assert code == 130
    left = _still_running(uid)
    assert not left, f"{len(left)} process(es) of the stopped check's runs were still running: {left}"


@pytest.mark.skipif(os.geteuid() != 0, reason="runs drop to a user of their own only where the grader runs as root")
def test_a_stop_that_comes_while_a_run_starts_ends_that_run(tmp_path, monkeypatch, capsys):
    """CI once found a process of the killed check above still running: the stop had come between the run's fork
    and the moment the grader held its pid, where no cleanup could see the run. Here the stop comes exactly there."""
    import threading

    from checker.cli import main
    from checker.grader import forkserver, runs, sandbox

    uid = _free_uid()
    monkeypatch.setenv(sandbox.RUN_UID_ENV, str(uid))
    monkeypatch.setattr(sandbox, "_IDENTITY", None)  # found again, with this test's user id
    submission = tmp_path / "lab"
    submission.mkdir()
    (submission / "train.py").write_text((repo_root() / "labs" / "01_item_syncs" / "train.py").read_text())
    started = []
    real_start = runs._start

    def start_then_stopped(*args, **kwargs):
        proc = real_start(*args, **kwargs)
        started.append(proc.pid)
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)  # `kill`, before _start has returned the run
        return proc

    monkeypatch.setattr(runs, "_start", start_then_stopped)
    try:
        code = main(["check", "01", "--submission", str(submission), "--device", "cpu", "--only", "host_syncs"])
    finally:
        forkserver.stop()
    assert started and code == 130, capsys.readouterr().err[-500:]
    left = _still_running(uid)
    assert not left, f"the run started as the stop came was still running: {left}"
