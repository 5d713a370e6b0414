"""Runs forked from a process that has imported torch (checker/grader/forkserver.py): what a run sees and what
the grader sees are those of a run started afresh; a server that cannot serve leaves runs to start afresh."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from checker.base.chapters import get_chapter
from checker.grader import forkserver, sandbox
from checker.grader.runs import run_script

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the fork server needs Linux")


@pytest.fixture
def server():
    started = forkserver.Server(preload=("checker.candidate.launch",))
    sandbox.become_subreaper()
    yield started
    started.close()


def spawn_script(server, tmp_path, body: str, env: dict[str, str]) -> tuple[int, str]:
    script = tmp_path / "probe.py"
    script.write_text(textwrap.dedent(body))
    read, write = os.pipe()
    try:
        pid = server.spawn(["--script", str(script)], str(tmp_path), env, None, sandbox.Limits(), False, write)
    finally:
        os.close(write)
    assert pid is not None, server.why
    run = forkserver.ForkedRun(pid, read)
    output = run.stdout.read().decode()
    code = run.wait()
    run.stdout.close()
    return code, output


def test_a_forked_run_is_the_graders_child_with_its_own_environment_and_folder(server, tmp_path):
    (tmp_path / "tmp").mkdir()
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "TMPDIR": str(tmp_path / "tmp"),
           "MARK": "this run's"}
    code, output = spawn_script(server, tmp_path, """
        import ctypes, json, os, sys, tempfile
        dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)  # PR_GET_DUMPABLE
        print(json.dumps({"ppid": os.getppid(), "dumpable": dumpable, "sid": os.getsid(0) == os.getpid(), "cwd": os.getcwd(),
                          "tmp": tempfile.gettempdir(), "mark": os.environ.get("MARK"),
                          "server_home": os.environ.get("HOME"), "torch": "torch" in sys.modules}))
    """, env)
    seen = json.loads(output.strip().splitlines()[-1])
    assert seen["ppid"] == os.getpid()  # reparented to the grader, which waits for it and counts its processes
    assert seen["sid"]  # a session of its own: the grader kills it by its group
    assert seen["cwd"] == str(tmp_path) and seen["tmp"] == str(tmp_path / "tmp") and seen["mark"] == "this run's"
    assert seen["server_home"] == str(tmp_path)
    assert seen["dumpable"] == 1  # as a process started afresh is (the server itself is not)
    # the launcher ran without a channel: no session was started, so it reports an error outcome (exit 3)
    assert code == 3


def test_a_forked_run_that_crashes_reports_its_exit_and_its_words(server, tmp_path):
    code, output = spawn_script(server, tmp_path, "import os; print('going', flush=True); os._exit(7)\n",
                                {"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
    assert code == 7 and "going" in output


def test_the_server_is_used_only_where_runs_cannot_reach_it(monkeypatch):
    """A run of the server's own user could rewrite it (tests/redteam/cheats/fork_server_patch): unless asked, runs
    are forked only where they are dropped to another user."""
    monkeypatch.delenv("WORKBOOK_FORKSERVER", raising=False)
    monkeypatch.setattr(sandbox, "run_identity", lambda: None)
    assert forkserver.enabled() is False and forkserver.server() is None
    monkeypatch.setattr(sandbox, "run_identity", lambda: (65534, 65534))
    assert forkserver.enabled() is True
    monkeypatch.setenv("WORKBOOK_FORKSERVER", "0")
    assert forkserver.enabled() is False
    monkeypatch.setattr(sandbox, "run_identity", lambda: None)
    monkeypatch.setenv("WORKBOOK_FORKSERVER", "1")
    assert forkserver.enabled() is True


def test_a_run_whose_middle_process_ended_first_still_starts(tmp_path):
    """The run waits until its middle process has ended; that process's pid must be known before the fork. Asked for
    in the run (os.getppid()) after the middle had already ended, it was the grader's own pid, and the run waited
    forever: CI hung on it. Here the middle and the run are slowed at os.close, so the middle always ends first."""
    probe = tmp_path / "probe.py"
    probe.write_text(textwrap.dedent("""
        import json, os, time
        from checker.grader import forkserver, sandbox

        sandbox.become_subreaper()
        grader = os.getpid()
        real_close = os.close
        def slow_close(fd):
            if os.getpid() != grader:
                time.sleep(0.3)
            real_close(fd)
        os.close = slow_close
        def become_run(request, fds, middle):
            os.write(fds[0], json.dumps({"middle": middle, "parent": os.getppid()}).encode())
            os._exit(0)
        forkserver._become_run = become_run
        read, write = os.pipe()
        pid = forkserver._fork_run(None, {}, [write])
        os.waitpid(pid, 0)
        seen = json.loads(os.read(read, 1000))
        print(json.dumps({"grader": grader, **seen}))
    """))
    proc = subprocess.run([sys.executable, str(probe)], capture_output=True, text=True, timeout=60,
                          cwd=str(tmp_path), env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["parent"] == seen["grader"]  # the middle had ended: the run was the grader's already
    assert seen["middle"] != seen["grader"]  # and it was told the middle's pid, not the grader's


def test_a_server_that_cannot_import_refuses_and_says_why():
    refused = forkserver.Server(preload=("no_such_module_for_the_workbook",))
    try:
        assert refused.wait_ready() is False
        assert "no_such_module_for_the_workbook" in refused.why
        read, write = os.pipe()
        assert refused.spawn([], "/", {}, None, sandbox.Limits(), False, write) is None
        os.close(read), os.close(write)
    finally:
        refused.close()
    assert not os.path.exists(refused.folder)  # its HOME and TMPDIR go with it


@pytest.mark.slow
def test_runs_start_afresh_where_the_server_refuses(monkeypatch):
    """The grader's fallback: a refused server leaves every run to be started with its own interpreter."""
    chapter = get_chapter("01")
    monkeypatch.setenv("WORKBOOK_FORKSERVER", "1")  # asked for, even where runs are not dropped (as here, in CI)
    refused = forkserver.Server(preload=("no_such_module_for_the_workbook",))
    monkeypatch.setattr(forkserver, "_SERVER", refused)
    try:
        run = run_script(chapter, chapter.solution_script, "cpu", seed=3, window_key=5)
        assert run.forked is False and run.weights
        assert "no_such_module_for_the_workbook" in (forkserver.refused() or "")
    finally:
        refused.close()
        monkeypatch.setattr(forkserver, "_SERVER", None)


@pytest.mark.slow
def test_a_forked_run_trains_the_same_weights_as_one_started_afresh(monkeypatch):
    chapter = get_chapter("01")
    monkeypatch.setenv("WORKBOOK_FORKSERVER", "1")
    forked = run_script(chapter, chapter.solution_script, "cpu", seed=3, window_key=5)
    monkeypatch.setenv("WORKBOOK_FORKSERVER", "0")
    fresh = run_script(chapter, chapter.solution_script, "cpu", seed=3, window_key=5)
    assert forked.forked and not fresh.forked
    assert forked.weights == fresh.weights  # on a CPU the same ops in the same order: the same bytes


def test_a_server_that_does_not_answer_is_given_up(monkeypatch):
    """A server stuck in its imports must not hang the check: past the wait, runs start afresh."""
    monkeypatch.setattr(forkserver, "READY_TIMEOUT_S", 0.5)
    stuck = forkserver.Server(preload=("torch",))  # importing torch takes longer than half a second
    try:
        assert stuck.wait_ready() is False and "did not answer" in stuck.why
        assert stuck.proc.wait(timeout=10) is not None
    finally:
        stuck.close()


def test_a_grading_task_does_not_count_the_graders_own_fork_server_as_the_students_leftover():
    """A class graded on a GPU said "left 1 process running after its runs ended" for every student: the task
    counted the fork server it had started. It is closed first; a process the student left is still counted."""
    import subprocess
    import sys

    code = (
        "import os, subprocess, sys\n"
        "os.environ['WORKBOOK_FORKSERVER'] = '1'\n"
        "from checker.grader import forkserver\n"
        "from checker.grading.task import leftovers\n"
        "forkserver.prestart()\n"
        "print(leftovers())\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "print(leftovers())\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0", "1"]


def test_the_servers_imports_fix_no_inductor_paths():
    """Inductor's codecache fixes a folder under the importing process's TMPDIR and user name when imported: in the
    server, a run dropped to another user could not compile (chapters 04 and 05 failed so under CI). The server's
    imports must leave it to each run."""
    code = ("import importlib, sys; from checker.grader.forkserver import PRELOAD; "
            "[importlib.import_module(m) for m in PRELOAD]; print('torch._inductor.codecache' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip().splitlines()[-1] == "False"


def test_a_server_that_refused_and_ended_stays_refused(monkeypatch):
    """A server that could not import ends right after saying so; found ended before its answer was read, it must
    not be taken for one that ended while serving and replaced by a new one (the check would then fork its runs
    from a server it had been told not to trust, and this test's neighbour flaked on it)."""
    monkeypatch.setenv("WORKBOOK_FORKSERVER", "1")
    refused = forkserver.Server(preload=("no_such_module_for_the_workbook",))
    refused.proc.wait(timeout=120)  # ended, its refusal unread
    monkeypatch.setattr(forkserver, "_SERVER", refused)
    try:
        assert forkserver.server() is refused and refused.ready is False
        assert "no_such_module_for_the_workbook" in (forkserver.refused() or "")
    finally:
        refused.close()
        monkeypatch.setattr(forkserver, "_SERVER", None)
