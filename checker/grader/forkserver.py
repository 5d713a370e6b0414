"""Runs started from a process that has already imported torch: the seconds every run spent importing, saved.

Every run of a check is a fresh process, and each one used to spend its first seconds importing torch (and,
when it made its optimizer, torch._dynamo): on an H100, 4 to 5 s of start-up and 2 to 3 s of set-up per run,
four or more runs per check. A fork server imports them once per grading
process and forks each run from there, the way a DataLoader forks its workers after torch is imported.

What stays as it was for a run started with ``subprocess``:

* The server runs as the grader's own user and never runs a script itself. Each run is forked from it, then
  forked once more, so that it is reparented to the grader (a child subreaper): the grader waits for it, counts
  and kills its processes, exactly as for a run it started. In between it starts its own session, takes the
  run's stdout pipe (passed over the socket), closes every other file, applies the run's limits, its network
  namespace and its unprivileged user (``sandbox.preexec``), then dies with the grader (PR_SET_PDEATHSIG, set
  once it is the grader's child) and takes the run's environment, folder and arguments.
* Nothing of one run reaches another: each is forked from the server's state right after its imports, and a run
  dropped to an unprivileged user cannot reach the server, which runs as the grader's user. Where runs are not
  dropped (the grader is not root, or the unprivileged user cannot run this Python), a run is the server's own
  user: it could rewrite the server's memory (as root, through /proc/<pid>/mem, whatever the server's dumpable
  flag) or pin and renice it, and so every process forked after it, the referee and the slow script's runs
  included (the red team's fork_server_patch in tests/redteam/ passed same_work with half the steps that way).
  So, unless asked, the server is used only where runs are dropped: on a GPU machine graded as root.
* CUDA is never started in the server (a forked process cannot use a CUDA context its parent made): the server
  asks the driver after its imports whether it was initialized (``_cuda_started``), and refuses to serve if so; the grader then starts
  each run the ordinary way. So does every run under nsys or ncu, which must start the process themselves.

``WORKBOOK_FORKSERVER=0`` starts every run the ordinary way; ``=1`` forks even where runs are not dropped.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import random
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict

from checker.grader import sandbox

# What the server imports before it forks runs: what every run imports (torch and the harness), what making an
# optimizer imports (torch._dynamo, seconds of a run's set-up) and what the chapters' workloads import.
PRELOAD = ("torch", "torch._dynamo", "torchvision", "checker.candidate.launch", "checker.lab", "checker.grader.referee")
# Not torch._inductor (what torch.compile imports on its first call), tried twice: imported first, it fixed a path
# under the server's TMPDIR and user (codecache's precompiled headers: a run dropped to another user could not
# compile) and saved a CPU check nothing; imported once the server was idle, with that path made again in each run,
# it starts CUDA (torch._inductor.compile_fx initializes the driver), so the server refuses and every run of the
# check starts afresh, slower than without it.
LAUNCH = "checker.candidate.launch"  # what a run runs; the referee (checker.grader.referee) is forked here too
_MAX_MESSAGE = 1 << 20
READY_TIMEOUT_S = 300.0  # the server's imports (seconds; minutes on a cold disk): past this, runs start afresh
REPLY_TIMEOUT_S = 60.0  # one fork


def enabled() -> bool:
    """Whether runs are forked from a server here. ``WORKBOOK_FORKSERVER``: ``0`` never; ``1`` always (your own
    lab on your own machine: faster, but a run of your own user can reach the server, so never for grading anyone
    else); unset, only where the runs are dropped to another user (``sandbox.run_identity()``: the grader is root),
    whom the server, the grader's own process, is out of reach of."""
    if not sys.platform.startswith("linux"):
        return False
    value = os.environ.get("WORKBOOK_FORKSERVER", "")
    if value in ("0", "1"):
        return value == "1"
    return sandbox.run_identity() is not None


# -- the grader's side --------------------------------------------------------------------------------------
class ForkedRun:
    """A run forked by the server and reparented to this process: what ``subprocess.Popen`` offers, as used."""

    def __init__(self, pid: int, stdout_fd: int):
        self.pid = pid
        self.stdout = os.fdopen(stdout_fd, "rb", buffering=0)
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                pid, status = os.waitpid(self.pid, os.WNOHANG)
            except ChildProcessError:  # reaped elsewhere: it has ended
                self.returncode = -9
                return self.returncode
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def wait(self) -> int:
        while self.poll() is None:
            time.sleep(0.01)
        return self.returncode


class Server:
    """One fork server for this grading process, started on first use."""

    def __init__(self, preload: tuple[str, ...] = PRELOAD):
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self.folder = folder = tempfile.mkdtemp(prefix="wb-forkserver-")  # its HOME and TMPDIR, removed at close
        env = sandbox.clean_environment()
        env.update(HOME=folder, TMPDIR=folder, PYTHONUNBUFFERED="1", PYTHONDONTWRITEBYTECODE="1")
        self.proc = subprocess.Popen(
            [*sandbox.python_command("checker.grader.forkserver"), str(theirs.fileno()), *preload],
            pass_fds=(theirs.fileno(),), env=env, cwd=folder, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True,
            preexec_fn=sandbox.die_with_parent_process,
        )
        theirs.close()
        self.ready: bool | None = None  # None until the server said whether it serves
        self.why = ""

    def wait_ready(self) -> bool:
        if self.ready is None:
            reply = self._receive(READY_TIMEOUT_S)
            self.ready = bool(reply.get("ready"))
            self.why = str(reply.get("why", ""))
        return self.ready

    def _receive(self, timeout: float) -> dict:
        self.sock.settimeout(timeout)
        try:
            data = self.sock.recv(_MAX_MESSAGE)
        except socket.timeout:
            self.proc.kill()  # a server that does not answer serves no more
            return {"ready": False, "why": f"the fork server did not answer within {timeout:.0f} s"}
        except OSError as err:
            return {"ready": False, "why": f"the fork server's socket failed: {err}"}
        finally:
            self.sock.settimeout(None)
        if not data:
            return {"ready": False, "why": "the fork server ended"}
        return json.loads(data)

    def spawn(self, args: list[str], cwd: str, env: dict[str, str], identity, limits, isolate_network: bool,
              stdout_fd: int, stderr_fd: int | None = None, module: str = LAUNCH,
              scratch: tuple[str, ...] | None = None) -> int | None:
        """Fork a process running ``module``'s main(``args``): its pid, or None if the server cannot. ``scratch``:
        the folders bound into the run's private scratch places (sandbox.private_scratch); None: none made."""
        if not self.wait_ready():
            return None
        request = {"module": module, "args": args, "cwd": cwd, "env": env, "identity": identity,
                   "limits": asdict(limits), "isolate_network": isolate_network, "grader": os.getpid(),
                   "scratch": list(scratch) if scratch is not None else None}
        fds = [stdout_fd] if stderr_fd is None else [stdout_fd, stderr_fd]
        try:
            socket.send_fds(self.sock, [json.dumps(request).encode()], fds)
        except OSError:
            self.ready, self.why = False, "the fork server ended"
            return None
        reply = self._receive(REPLY_TIMEOUT_S)
        if not reply.get("pid"):
            self.ready, self.why = False, str(reply.get("why", "the fork server could not start the run"))
            return None
        return int(reply["pid"])

    def close(self) -> None:
        self.sock.close()
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


_SERVER: Server | None = None


def server() -> Server | None:
    """This process's fork server (started now if need be), or None where runs start the ordinary way."""
    global _SERVER
    if not enabled():
        return None
    if _SERVER is not None and _SERVER.proc.poll() is not None:
        if _SERVER.ready is None:
            _SERVER.wait_ready()  # it ended before its answer was read: a refusal it sent stays one
        if _SERVER.ready is not False:
            _SERVER = None  # it ended while serving: start another (one that refused stays refused)
    if _SERVER is None:
        sandbox.become_subreaper()  # before any run is reparented
        _SERVER = Server()
        atexit.register(stop)
    return _SERVER


def refused() -> str | None:
    """Why this process's server does not serve (None: it serves, or none was started)."""
    if _SERVER is None or _SERVER.ready is not False:
        return None
    return _SERVER.why or "unknown"


def prestart() -> None:
    """Start the server now, so that its imports overlap the grader's own work before the first run."""
    server()


def run_module(module: str, args: list[str], env: dict[str, str], timeout: float) -> subprocess.CompletedProcess:
    """``python -I -B -c 'from module import main; main(args)'`` as the grader's own user, its output captured:
    forked by the server where there is one that serves."""
    srv = server()
    if srv is not None:
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        held = sandbox.hold_stops()  # until _collect holds the process, and ends it if stopped
        try:
            pid = srv.spawn(args, os.getcwd(), env, None, sandbox.Limits(), False, out_write, err_write, module)
        except BaseException:
            sandbox.release_stops(held)
            raise
        finally:
            os.close(out_write)
            os.close(err_write)
        if pid is not None:
            return _collect(pid, out_read, err_read, args, timeout, held)
        sandbox.release_stops(held)
        os.close(out_read)
        os.close(err_read)
    return subprocess.run(sandbox.python_command(module) + args, capture_output=True, text=True, timeout=timeout,
                          env=env)


def _collect(pid: int, out_read: int, err_read: int, args: list[str], timeout: float,
             held) -> subprocess.CompletedProcess:
    """Read a forked process's stdout and stderr to their end, then wait for it (killed past ``timeout``, or when
    the grader is stopped). ``held``: the signal mask to give back (sandbox.hold_stops) once it is in reach."""
    run = ForkedRun(pid, out_read)
    chunks: dict[int, list[bytes]] = {out_read: [], err_read: []}
    deadline = time.monotonic() + timeout
    open_fds = {out_read, err_read}
    try:
        sandbox.release_stops(held)  # a stop that came while it started is raised here
        while open_fds:
            left = deadline - time.monotonic()
            if left <= 0:
                sandbox.kill_group(pid)
                run.wait()
                raise subprocess.TimeoutExpired(args, timeout)
            ready, _, _ = select.select(list(open_fds), [], [], min(left, 1.0))
            for fd in ready:
                data = os.read(fd, 1 << 20)
                if data:
                    chunks[fd].append(data)
                else:
                    open_fds.discard(fd)
        code = run.wait()
    except BaseException:  # Ctrl-C, `kill`: it does not outlive the grader's stop
        if run.poll() is None:
            sandbox.kill_group(pid)
            run.wait()
        raise
    finally:
        run.stdout.close()
        os.close(err_read)
    text = {fd: b"".join(parts).decode(errors="replace") for fd, parts in chunks.items()}
    return subprocess.CompletedProcess(args, code, text[out_read], text[err_read])


def stop() -> None:
    """Close this process's fork server, if it has one (at exit, or before a grading task counts what a student
    left running: the server is the grader's, not the student's)."""
    global _SERVER
    if _SERVER is not None:
        _SERVER.close()
        _SERVER = None


# -- the server's side --------------------------------------------------------------------------------------
CUDA_ERROR_NOT_INITIALIZED = 3


def _cuda_started() -> bool:
    """Whether the CUDA driver was initialized in this process (cuInit), which a forked child could not undo.

    Importing torch maps the driver library (libcuda) without initializing it, and a library mapped is safe to
    fork. The driver answers cuDeviceGetCount with CUDA_ERROR_NOT_INITIALIZED until cuInit was called, and
    asking changes nothing."""
    import ctypes

    try:
        with open("/proc/self/maps") as handle:
            mapped = [line.split()[-1] for line in handle if "libcuda.so" in line]
    except OSError:
        return False
    if not mapped:
        return False  # no driver here (a CPU machine), or not loaded: nothing can have started
    count = ctypes.c_int(0)
    return ctypes.CDLL(mapped[0]).cuDeviceGetCount(ctypes.byref(count)) != CUDA_ERROR_NOT_INITIALIZED


PR_SET_DUMPABLE = 4


def main(argv: list[str]) -> int:  # pragma: no cover - runs as the server process
    # not dumpable: an unprivileged process of its user cannot ptrace it (root still can, and a process of its
    # user can still signal, pin or renice it: enabled() keeps runs of its user away); each run it forks is made
    # dumpable again, as a process started afresh is
    sandbox._LIBC.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    sock = socket.socket(fileno=int(argv[0]))
    why = ""
    try:
        for name in argv[1:]:
            importlib.import_module(name)
    except BaseException as err:  # noqa: BLE001 - reported to the grader, which then starts runs itself
        why = f"the fork server could not import {name}: {type(err).__name__}: {err}"
    if not why and _cuda_started():
        why = "CUDA was started while the fork server imported torch"
    sock.send(json.dumps({"ready": not why, "why": why}).encode())
    if why:
        return 1
    while True:
        try:
            data, fds, _flags, _addr = socket.recv_fds(sock, _MAX_MESSAGE, 4)
        except OSError:
            return 0
        if not data:
            return 0  # the grader closed its end, or ended
        try:
            request = json.loads(data)
            pid = _fork_run(sock, request, fds)
            sock.send(json.dumps({"pid": pid}).encode())
        except Exception as err:  # noqa: BLE001
            sock.send(json.dumps({"pid": None, "why": f"{type(err).__name__}: {err}"}).encode())
        finally:
            for fd in fds:
                os.close(fd)


def _fork_run(sock: socket.socket, request: dict, fds: list[int]) -> int:  # pragma: no cover - server
    """Fork twice: the run's pid, once its parent (the middle process) has ended and it is the grader's."""
    read, write = os.pipe()
    middle = os.fork()
    if middle == 0:
        try:
            os.close(read)
            # the middle's pid, known before the fork: asked for after it (os.getppid() in the run), it would be
            # the grader's whenever the middle had already ended, and the run would wait for that forever
            middle_pid = os.getpid()
            run = os.fork()
            if run == 0:
                os.close(write)
                _become_run(request, fds, middle_pid)
            os.write(write, str(run).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        answer = handle.read()
    os.waitpid(middle, 0)
    if not answer:
        raise RuntimeError("the run was not forked")
    return int(answer)


def _become_run(request: dict, fds: list[int], middle: int) -> None:  # pragma: no cover - the run itself
    code = 1
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(fds[0], 1)
        os.dup2(fds[-1], 2)
        os.closerange(3, os.sysconf("SC_OPEN_MAX"))
        identity = tuple(request["identity"]) if request["identity"] else None
        limits = sandbox.Limits(**request["limits"])
        scratch = request.get("scratch")
        sandbox.preexec(identity, limits, bool(request["isolate_network"]), die_with_parent=False,
                        scratch_keep=tuple(scratch) if scratch is not None else None)()
        given_up = time.monotonic() + REPLY_TIMEOUT_S
        while os.getppid() == middle:  # until the middle process has ended and this run is the grader's
            if time.monotonic() > given_up:
                os._exit(1)  # never a run that waits forever: the grader sees it end and says so
            time.sleep(0.001)
        sandbox.die_with_parent_process()
        sandbox._LIBC.prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
        if os.getppid() != int(request["grader"]):
            os._exit(1)  # the grader ended meanwhile
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        tempfile.tempdir = None  # TMPDIR is the run's now
        random.seed()  # not the server's state, shared by every run it forked
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
        code = importlib.import_module(request.get("module") or LAUNCH).main(list(request["args"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException:  # noqa: BLE001
        traceback.print_exc()
        code = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) else 1)
