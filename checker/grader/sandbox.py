"""Where and how a candidate's process runs, as the grader sets it up (nothing here runs in the candidate).

* A private run folder per run, made with an unguessable name, holding only a copy of the graded script
  (never the folder it came from: no module beside it can shadow a standard or third-party one), the two
  named pipes of the channel, and the run's own HOME and TMPDIR.
* A clean environment and an isolated interpreter (``python -I -B``): no PYTHON* variables, no user
  site-packages, no current folder on ``sys.path``, no bytecode written anywhere.
* When the grader runs as root, the run drops to an unprivileged user (``nobody``), which cannot write the
  checkout, the Python environment, the output folder or other runs' folders; it gets its own network
  namespace (no network) when the kernel allows it.
* Nothing outlives a run outside its folder: where the kernel allows a mount namespace, the run gets its own empty
  /dev/shm, /tmp, /var/tmp and /run/lock (private tmpfs mounts that vanish with it; its folder, and a compile
  cache's place, are bound back in at the same paths), and an IPC namespace of its own: System V semaphores, shared
  memory segments and message queues, and POSIX message queues, all vanish with it. Where it does not, files the
  run's user made in those places during the run (and in /dev/mqueue) are found afterwards, removed, and the run
  refused (``left_outside``); so are System V objects the run's user made (``ipc_objects``).
* Limits: a per-process memory cap on CPU runs (RLIMIT_DATA: the memory a process writes, not the address
  space it reserves; CUDA's mappings are not worth the risk, so a GPU run is capped by its timeout only), no
  core files, a file-size cap, and a process-count cap when the run is unprivileged.
* No survivors: the run starts a new session; the grader is a child subreaper, so descendants that detach
  (a double fork, setsid) are reparented to it; when the run ends every one of them is killed and counted.
* Tampering: files of the checkout or the Python environment whose content changed while the check ran, or that
  appeared, are found at the end (those whose ctime, which no process can set, moved, compared by content), and
  the verdict is withheld (``TrustedFiles``). Metadata changed meanwhile (a hard link, `touch`) voids no verdict;
  .git, which no verdict reads, is not watched.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import pwd
import re
import resource
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from checker.base.paths import repo_root

UNPRIVILEGED_USER = "nobody"
# A grading worker's own user id for the runs it starts, where several workers grade at once (set by
# checker.grading.classroom.plan_slots); ids from SLOT_UID_BASE up that no user of the system holds (Debian keeps
# 65000-65533 unassigned)
RUN_UID_ENV = "WORKBOOK_RUN_UID"
SLOT_UID_BASE = 65100
CLONE_NEWNET = 0x40000000
CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
IPC_RMID = 0
MS_NOSUID, MS_NODEV, MS_BIND, MS_REC, MS_PRIVATE = 0x2, 0x4, 0x1000, 0x4000, 0x40000
# Where any user may write outside a run's folder: what one run leaves there, a later run could read. Each run gets
# its own empty copy of these (private_scratch), or what it left there is found afterwards (left_outside).
SCRATCH_PLACES = ("/dev/shm", "/tmp", "/var/tmp", "/run/lock")
PR_SET_CHILD_SUBREAPER = 36
PR_SET_PDEATHSIG = 1
_KEEP_ENV = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "LD_LIBRARY_PATH", "CUDA_VISIBLE_DEVICES", "CUDA_HOME",
             "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES", "TERM")
_LIBC = ctypes.CDLL(None, use_errno=True)


def running_as_root() -> bool:
    return os.geteuid() == 0


_IDENTITY: tuple[tuple[int, int] | None, str] | None = None


def run_identity() -> tuple[int, int] | None:
    """(uid, gid) the candidate runs as when the grader is root; None: it runs as the grader's own user."""
    return isolation()[0]


def isolation() -> tuple[tuple[int, int] | None, str]:
    """Who runs the candidate, and one line saying so (and why, when it is the grader's own user)."""
    global _IDENTITY
    if _IDENTITY is None:
        _IDENTITY = _find_identity()
    return _IDENTITY


def worker_uids(count: int) -> list[int]:
    """``count`` user ids, none held by a user of this system, one per grading worker."""
    uids, uid = [], SLOT_UID_BASE
    while len(uids) < count:
        try:
            pwd.getpwuid(uid)
        except KeyError:
            uids.append(uid)
        uid += 1
    return uids


def _find_identity() -> tuple[tuple[int, int] | None, str]:
    own = os.environ.get(RUN_UID_ENV, "")
    if own.isdigit() and running_as_root() and os.environ.get("WORKBOOK_RUN_AS_ROOT") != "1":
        found = _nobody_identity(int(own), f"user id {own}, this grading worker's own (no other worker's runs share it)")
        if found[0] is not None:
            return found
    return _nobody_identity()


def _nobody_identity(uid: int | None = None, who: str | None = None) -> tuple[tuple[int, int] | None, str]:
    if not running_as_root():
        return None, (f"runs as the grader's own user ({pwd.getpwuid(os.geteuid()).pw_name}): changes to the "
                      "checkout or the Python environment are detected, not prevented")
    if os.environ.get("WORKBOOK_RUN_AS_ROOT") == "1":
        return None, "runs as root (WORKBOOK_RUN_AS_ROOT=1): changes to the grader's files are detected, not prevented"
    try:
        entry = pwd.getpwnam(UNPRIVILEGED_USER)
    except KeyError:
        return None, f"runs as root: this system has no user '{UNPRIVILEGED_USER}' to drop to"
    identity = (entry.pw_uid if uid is None else uid, entry.pw_gid)
    who = who or f"user '{UNPRIVILEGED_USER}'"
    try:
        probe = subprocess.run(probe_command(), capture_output=True, cwd="/",
                               preexec_fn=preexec(identity, Limits(), False), timeout=120,
                               env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")})
        failed, said = probe.returncode != 0, probe.stderr.decode(errors="replace")
    except (OSError, subprocess.SubprocessError) as err:
        failed, said = True, str(err)
    if failed:
        last = (said.strip().splitlines() or ["no output"])[-1]
        return None, (f"runs as root: {who} cannot run this Python and the checkout ({last[:160]}); "
                      "install them where other users can read them for the runs to drop privileges")
    return identity, f"runs as {who}, which cannot write the checkout or the Python environment"


def network_isolation_available() -> bool:
    """Whether a new network namespace can be made here (root, and a kernel and container that allow it)."""
    if not running_as_root():
        return False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only reports
        os._exit(0 if _LIBC.unshare(CLONE_NEWNET) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def scratch_isolation_available() -> bool:
    """Whether a run can be given private scratch places here (a mount namespace: root, and a kernel and container
    that allow it). WORKBOOK_PRIVATE_SCRATCH=0 says no, as an unprivileged grader would find (tests use it)."""
    if os.environ.get("WORKBOOK_PRIVATE_SCRATCH") == "0" or not running_as_root():
        return False
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child only reports
        os._exit(0 if private_scratch(()) else 1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> bool:
    encode = lambda text: None if text is None else text.encode()  # noqa: E731
    return _LIBC.mount(encode(source), encode(target), encode(fstype), flags, encode(data)) == 0


def private_scratch(keep: tuple[str, ...]) -> bool:  # pragma: no cover - runs in the forked child
    """This process and its children get their own empty SCRATCH_PLACES, with each folder of ``keep`` (the run's
    folder, a compile cache's place) bound back at its own path. False, with nothing changed, where the kernel
    refuses a mount namespace; a failure after that point ends the process (never a run with shared scratch
    that believes it has its own)."""
    if _LIBC.unshare(CLONE_NEWNS | CLONE_NEWIPC) != 0:  # both, or neither: the caller then looks for what was left
        return False
    try:
        if not _mount(None, "/", None, MS_REC | MS_PRIVATE):  # or the mounts below would show in the grader's
            raise OSError("could not make the mounts private")
        handles = {path: os.open(path, os.O_PATH | os.O_DIRECTORY) for path in keep}
        for place in SCRATCH_PLACES:
            if os.path.isdir(place) and not os.path.islink(place):
                if not _mount("tmpfs", place, "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777"):
                    raise OSError(f"could not mount a private {place}")
        for path, handle in sorted(handles.items(), key=lambda item: item[0].count("/")):  # a parent before its child
            if any(path == p or path.startswith(p + "/") for p in SCRATCH_PLACES):
                os.makedirs(path, mode=0o711, exist_ok=True)
                if not _mount(f"/proc/self/fd/{handle}", path, None, MS_BIND | MS_REC):
                    raise OSError(f"could not bind {path} back")
            os.close(handle)
    except OSError as err:
        os.write(2, f"workbook sandbox: {err}\n".encode())
        os._exit(70)
    return True


IPC_KINDS = {"shm": "shared memory segment", "sem": "semaphore set", "msg": "message queue"}  # /proc/sysvipc/<kind>


def ipc_objects(uid: int) -> dict[tuple[str, int], str]:
    """The System V IPC objects ``uid`` made or owns, visible from here: (kind, id) -> what it is, with its key. Such
    an object outlives the process that made it (an IPC namespace of its own ends it with the run), so one left by a
    run is state the next run could read."""
    found: dict[tuple[str, int], str] = {}
    for kind, what in IPC_KINDS.items():
        try:
            lines = Path(f"/proc/sysvipc/{kind}").read_text().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        header = lines[0].split()
        for line in lines[1:]:
            row = dict(zip(header, line.split()))
            try:
                ident = int(row["shmid" if kind == "shm" else f"{kind}id"])
                owners = {int(row["uid"]), int(row["cuid"])}
            except (KeyError, ValueError):
                continue
            if uid in owners:
                found[(kind, ident)] = f"a System V {what} (key {int(row.get('key', 0)):#x})"
    return found


def remove_ipc(objects) -> None:
    """Remove System V IPC objects by (kind, id), as ipcrm does."""
    for kind, ident in objects:
        if kind == "shm":
            _LIBC.shmctl(ident, IPC_RMID, None)
        elif kind == "sem":
            _LIBC.semctl(ident, 0, IPC_RMID)
        elif kind == "msg":
            _LIBC.msgctl(ident, IPC_RMID, None)


def left_outside(since_ns: int, uid: int, exclude: list[Path], limit: int = 5) -> list[str]:
    """Files and folders in SCRATCH_PLACES that ``uid`` owns and that changed after ``since_ns`` (wall clock, ns;
    ctime, which no unprivileged process can set back), outside ``exclude``: what a run left where a later run
    could read it. Where runs have private scratch places this finds nothing (they vanished with the run). Where runs
    are the grader's own user, a concurrent check's files are that user's too: they are found (a refused run, never
    a passed one)."""
    skip = {str(path) for path in exclude}
    found: list[str] = []
    stack = [place for place in SCRATCH_PLACES + ("/dev/mqueue",) if os.path.isdir(place)]  # POSIX queues show there
    while stack and len(found) < limit:
        current = stack.pop()
        try:
            entries = list(os.scandir(current))
        except OSError:
            continue
        for entry in entries:
            if entry.path in skip:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid == uid and info.st_ctime_ns > since_ns:
                found.append(entry.path)
                if len(found) >= limit:
                    break
            elif stat.S_ISDIR(info.st_mode) and (info.st_uid == uid or info.st_mode & stat.S_IWOTH):
                stack.append(entry.path)  # only where the run could have written: not another check's private folder
    return found


def remove_left(paths: list[str]) -> None:
    """Remove what a run left outside its folder, so that no later run finds it."""
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass


_SUBREAPER = False


def become_subreaper(forked: bool = False) -> None:
    """Make orphaned descendants of this process its children, so that none escapes being killed. ``forked``: this
    process was just forked, and a fork does not inherit the setting, whatever the parent's flag says."""
    global _SUBREAPER
    if (forked or not _SUBREAPER) and sys.platform.startswith("linux"):
        _LIBC.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        _SUBREAPER = True


@dataclass
class Limits:
    memory_mb: int | None = None  # data (heap and private writable mappings) per process, CPU runs
    file_mb: int = 4096  # largest file a run may write (nsys reports included)
    processes: int = 4096  # processes and threads of the unprivileged user


@dataclass
class RunFolder:
    """A run's private folder: the script's copy, the channel's pipes, HOME and TMPDIR."""

    path: Path
    script: Path
    identity: tuple[int, int] | None

    @classmethod
    def create(cls, parent: Path, script: Path, identity: tuple[int, int] | None) -> "RunFolder":
        """The folder, owned by the run's user."""
        path = Path(tempfile.mkdtemp(prefix="run-", dir=parent))
        for name in ("home", "tmp"):
            (path / name).mkdir()
        copy = path / script.name
        shutil.copyfile(script, copy)
        os.chmod(copy, 0o444)
        for pipe in ("evt", "ctl"):
            os.mkfifo(path / pipe, 0o600)
        if identity is not None:
            uid, gid = identity
            for item in [path, *path.iterdir()]:
                os.chown(item, uid, gid)
        return cls(path=path, script=copy, identity=identity)

    def close(self) -> None:
        """Take the folder back from the run (its files stay readable to the grader until the check ends)."""
        if self.identity is not None:
            os.chown(self.path, 0, 0)
            os.chmod(self.path, 0o700)


# A run's TMPDIR is <check folder>/run-XXXXXXXX/tmp, and Python's multiprocessing (DataLoader workers) puts
# AF_UNIX sockets in it, at tmp/pymp-XXXXXXXX/listener-XXXXXXXX: a socket path holds at most 107 bytes.
SOCKET_PATH_MAX = 107
_RUN_TMP_SUFFIX = "/run-XXXXXXXX/tmp/pymp-XXXXXXXX/listener-XXXXXXXX"


def check_folder() -> Path:
    """A folder for one check's runs: unguessable, traversable but not listable by an unprivileged run, and
    short enough a path for the sockets of the runs' worker processes. Under the temporary folder ($TMPDIR)
    when that leaves room (a grading worker's is deep), else under /tmp."""
    base = tempfile.gettempdir()
    if len(base) + len("/wb-XXXXXXXX") + len(_RUN_TMP_SUFFIX) > SOCKET_PATH_MAX and os.access("/tmp", os.W_OK | os.X_OK):
        base = "/tmp"
    path = Path(tempfile.mkdtemp(prefix="wb-", dir=base))
    os.chmod(path, 0o711)
    return path


def clean_environment() -> dict[str, str]:
    """What of the grader's environment a process it starts keeps: the paths, the locale, the GPUs to use."""
    env = {key: os.environ[key] for key in _KEEP_ENV if key in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    return env


def environment(folder: RunFolder) -> dict[str, str]:
    env = clean_environment()
    home, tmp = folder.path / "home", folder.path / "tmp"
    # USER and LOGNAME: getpass.getuser() answers from them, also for a worker's own user id, which no user holds
    env.update(USER="workbook-run", LOGNAME="workbook-run",
               HOME=str(home), TMPDIR=str(tmp), XDG_CACHE_HOME=str(home / ".cache"), PYTHONUNBUFFERED="1",
               WORKBOOK_ROOT=str(repo_root()), PYTHONDONTWRITEBYTECODE="1",
               # torch.compile's caches in the run's own folder (a kept compile cache, where there is one, replaces
               # them): a run forked from the fork server would otherwise reach for the server's HOME, which the
               # run's user cannot write ("Permission denied: '/tmp/wb-forkserver-.../.triton'" at the first
               # compiled kernel)
               TORCHINDUCTOR_CACHE_DIR=str(home / ".cache" / "torchinductor"),
               TRITON_CACHE_DIR=str(home / ".cache" / "triton"))
    return env


def grader_folder(parent: Path, prefix: str) -> Path:
    """A folder only the grader's user can open: where it keeps what a run sent it (a trace)."""
    path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    os.chmod(path, 0o700)
    return path


# What the unprivileged user must reach to run a candidate: this interpreter, the checkout and torch. Found and
# read, not imported: importing torch takes seconds, and the first run imports it anyway.
_PROBE = ("import importlib.util, sys; sys.path[:] = {paths!r}\n"
          "for name in ('torch', 'checker.lab', 'checker.candidate.launch'):\n"
          "    spec = importlib.util.find_spec(name)\n"
          "    if spec is None or spec.origin is None: raise SystemExit(name + ' not found')\n"
          "    open(spec.origin, 'rb').read(1)\n")


def probe_command() -> list[str]:
    """A quick check, run as the unprivileged user, that it can find and read what a run imports."""
    return [sys.executable, "-I", "-S", "-B", "-c", _PROBE.format(paths=_import_paths())]


def import_places() -> list[str]:
    """The folders a run reads its code from (the checkout, site-packages) and the interpreter it runs (a virtual
    environment's folder, its pyvenv.cfg with it), and the folders LD_LIBRARY_PATH names (a library nsys's importer
    loads, unpacked in /tmp): bound back into a run's private scratch places where they live under one (a checkout
    or an environment in /tmp)."""
    places = _import_paths()
    libraries = os.environ.get("LD_LIBRARY_PATH", "").split(os.pathsep)
    for place in (sys.prefix, os.path.dirname(sys.executable), *libraries):
        if place and os.path.isabs(place) and os.path.isdir(place) and place not in places:
            places.append(place)
    return places


def _import_paths() -> list[str]:
    """Where a run's interpreter imports from: the grader's own checkout and site-packages, nothing else."""
    paths = [str(repo_root())]
    cwd = os.getcwd()
    for entry in sys.path:
        if entry and entry != cwd and Path(entry).is_absolute() and entry not in paths and os.path.isdir(entry):
            paths.append(entry)
    return paths


def python_command(module: str = "checker.candidate.launch") -> list[str]:
    """An isolated interpreter running ``module``'s main(), importing the grader's own checker and
    site-packages and nothing else."""
    boot = (f"import sys; sys.path[:] = {_import_paths()!r}; from {module} import main; "
            "raise SystemExit(main(sys.argv[1:]))")
    return [sys.executable, "-I", "-B", "-c", boot]


STOP_SIGNALS = frozenset({signal.SIGINT, signal.SIGTERM})


def hold_stops():
    """Hold Ctrl-C and `kill` (SIGINT, SIGTERM) while a run is being started, and return the signal mask to give
    back to ``release_stops``. A stop raised between the run's fork and the moment its caller holds its pid left
    the run going, unseen by the cleanup that ends a stopped check's runs (a check killed in CI left one behind).
    Released inside that cleanup's reach, a stop that came meanwhile is raised there."""
    return signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)


def release_stops(previous) -> None:
    """Give back the signal mask ``hold_stops`` returned: a stop held meanwhile is raised now (KeyboardInterrupt)."""
    signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def preexec(identity: tuple[int, int] | None, limits: Limits, isolate_network: bool, die_with_parent: bool = True,
            scratch_keep: tuple[str, ...] | None = None):
    """What the child does between fork and exec: limits, no network, private scratch places (``scratch_keep``: the
    folders to bind back into them; None: the grader's own), then the unprivileged user (and, unless
    ``die_with_parent`` is False, death with its parent: a run forked by checker.grader.forkserver sets that
    once it is the grader's child)."""

    def setup() -> None:  # pragma: no cover - runs in the forked child
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # held by the grader while it started this (hold_stops)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        file_bytes = limits.file_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
        if limits.memory_mb:
            cap = limits.memory_mb * 1024 * 1024
            resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))
        if isolate_network and _LIBC.unshare(CLONE_NEWNET) == 0:
            _loopback_up()  # a new namespace has only a loopback, down; local tools (nsys) talk over it
        if scratch_keep is not None and not private_scratch(scratch_keep):
            os.write(2, b"workbook sandbox: no mount namespace for the run's private scratch places\n")
            os._exit(70)  # the grader found them available: a run without them would share what others left
        if identity is not None:
            uid, gid = identity
            resource.setrlimit(resource.RLIMIT_NPROC, (limits.processes, limits.processes))
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
        if die_with_parent:  # after setuid, which clears it: dies with the grader
            die_with_parent_process()

    return setup


def die_with_parent_process() -> None:  # pragma: no cover - runs in a child
    """This process is killed when its parent ends (PR_SET_PDEATHSIG)."""
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def enter_job_network() -> bool:  # pragma: no cover - runs in a forked job leader
    """This process (and the ranks it forks) in a network namespace of its own with its loopback up: the ranks of
    one job reach each other, nothing else. False where the kernel refuses a namespace."""
    if _LIBC.unshare(CLONE_NEWNET) != 0:
        return False
    _loopback_up()
    return True


def _loopback_up() -> None:  # pragma: no cover - runs in the forked child
    """ip link set lo up, through the ioctl that command uses."""
    import fcntl
    import socket
    import struct

    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as handle:
        request = struct.pack("16sH14s", b"lo", 0, bytes(14))
        flags = struct.unpack("16sH14s", fcntl.ioctl(handle, siocgifflags, request))[1]
        fcntl.ioctl(handle, siocsifflags, struct.pack("16sH14s", b"lo", flags | iff_up, bytes(14)))


# -- survivors ---------------------------------------------------------------------------------------------
def _parents() -> dict[int, int]:
    """pid -> parent pid for every process visible in /proc."""
    table = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit() and (parent := _parent(int(entry.name))) is not None:
            table[int(entry.name)] = parent
    return table


def _parent(pid: int) -> int | None:
    """The parent of ``pid``, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return int(handle.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _cpu_ns(pid: int) -> tuple[int, int]:
    """(ns ``pid``'s threads ran on a CPU, ns of its children that ended and were waited for), 0 where it is gone.

    The live threads' time comes from their schedstat (ns). A thread that started and ended between two reads has no
    schedstat left, but its time stays in the process's utime and stime, which the kernel keeps equal to the whole
    process's run time, dead threads included, floored to clock ticks: the larger of the two is the process's time,
    within a tick, so work done in a short-lived thread is not lost."""
    live = 0
    try:
        for task in os.scandir(f"/proc/{pid}/task"):  # every thread of the process (a schedstat is one thread's)
            try:
                with open(f"{task.path}/schedstat", "rb") as handle:
                    live += int(handle.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        user, system, child_user, child_system = (int(fields[i]) for i in (11, 12, 13, 14))
    except (OSError, ValueError, IndexError):
        return 0, 0
    tick_ns = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return max(live, (user + system) * tick_ns), (child_user + child_system) * tick_ns


def own_cpu_ns(pid: int) -> int:
    """ns ``pid``'s own threads ran on a CPU (live and ended), 0 where it is gone: read at each step of a job's rank,
    the CPU each step cost its process."""
    return _cpu_ns(pid)[0]


def cpu_of_run(pid: int, below: set[int] | None = None) -> tuple[int, int]:
    """(ns the run's own process ran, ns every other process under it ran): the live ones' time and what ended
    ones left in their parents' accounts. Read at a window's open and close, their difference says how much work
    was done in the window by processes that no trace of the run's own process records. ``below``: the processes
    under ``pid``, where the caller has just listed them (``descendants``)."""
    own, ended = _cpu_ns(pid)
    others = ended
    for child in descendants(pid) if below is None else below:
        ran, left = _cpu_ns(child)
        others += ran + left
    return own, others


def adopted(run: int, known: set[int]) -> set[int]:
    """The live processes that left ``run`` (orphans this process, a subreaper, adopted: a double fork, a launcher
    that exits), and what they started: every process below this one but the run's own and those in ``known``."""
    me = os.getpid()
    return {pid for pid in descendants(me) - known - {run} - descendants(run) if _alive(pid)}


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, their children, ...), now."""
    table = _parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in table.items() if parent in frontier and child not in found}
        found |= frontier
    return found


# torch.compile's pool of compile workers: a helper process started as this script, with its pool below it
_COMPILE_POOL = re.compile(rb"torch[/.]_inductor[/.]compile_worker")


def _argv(pid: int | None) -> list[bytes]:
    """A process's command line, split; empty where it is gone (or ``pid`` is None)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read().split(b"\0")
    except (OSError, TypeError):
        return []


def _is_compile_pool(pid: int) -> bool:
    return any(_COMPILE_POOL.search(arg) for arg in _argv(pid)[1:3])


# multiprocessing's own helpers under a run: the server a forkserver loader forks its workers from, and the tracker
# of named semaphores and shared memory that a spawn or forkserver context starts; neither runs the script's code
_MULTIPROCESSING_HELPER = re.compile(rb"multiprocessing[/.](?:forkserver|resource_tracker)")


def multiprocessing_helpers(below: set[int]) -> set[int]:
    """Of the processes ``below`` a run, multiprocessing's forkserver and resource tracker, by their command line.
    What a forkserver forks inherits its command line: a process whose parent reads so too is one of its children
    (a loader's worker, or a process of the script's own), not a helper."""
    def helper_like(pid: int | None) -> bool:
        return any(_MULTIPROCESSING_HELPER.search(arg) for arg in _argv(pid)[1:4])
    return {pid for pid in below if helper_like(pid) and not helper_like(_parent(pid))}


def worker_processes(below: set[int]) -> set[int]:
    """Of the processes ``below`` a run (``descendants``), those that may be its data workers: every one but
    torch.compile's pool of compile workers (started on the first compile, on a machine with many cores, and kept to
    the end) and the processes under it."""
    pools = {pid for pid in below if _is_compile_pool(pid)}
    if not pools:
        return set(below)
    parent = {pid: _parent(pid) for pid in below}

    def in_pool(pid: int | None) -> bool:
        while pid in parent:
            if pid in pools:
                return True
            pid = parent[pid]
        return False
    return {pid for pid in below if not in_pool(pid)}


def kill_survivors(pid: int, pgid: int | None, known: set[int] | None = None, grace_s: float = 3.0) -> int:
    """Wait up to ``grace_s`` for what ``pid`` left running to end by itself, then kill it all.

    Returns how many processes had to be killed: ones still below ``pid``, in its process group, or (this
    process being a subreaper) orphans reparented here.
    """
    me = os.getpid()
    known = known or set()
    deadline = time.monotonic() + grace_s

    def alive_left() -> set[int]:
        return {p for p in descendants(pid) if _alive(p)} | adopted(pid, known)

    while True:
        left = alive_left()
        if not left or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    killed: set[int] = set()
    for _ in range(20):  # again while any is left: one killed in the middle of a fork leaves the child it made
        for target in left:
            try:
                os.kill(target, signal.SIGKILL)
            except ProcessLookupError:
                pass
        if pgid is not None:
            kill_group(pgid)
        for target in left:  # reap the ones that became our children
            try:
                os.waitpid(target, 0)
            except ChildProcessError:
                pass
        killed |= left
        left = alive_left() - killed
        if not left:
            break
    for target in descendants(me) - known - {pid}:  # orphans that had already ended (zombies)
        try:
            os.waitpid(target, os.WNOHANG)
        except ChildProcessError:
            pass
    return len(killed)


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            return handle.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


# -- tampering ---------------------------------------------------------------------------------------------
def checkout_folders() -> list[Path]:
    """The checkout's folders a verdict depends on: the checker, the chapters, the reference solutions."""
    root = repo_root()
    return [root / "checker", root / "chapters", root / "solutions"]


def trusted_folders() -> list[Path]:
    """What the grader's verdict depends on: the checker, the chapters (baselines, workloads), the reference
    solutions (a grading worker trains them beside each student's runs), the Python installation and its
    site-packages."""
    root = repo_root()
    folders = checkout_folders()
    cwd = Path.cwd().resolve()
    for entry in sys.path:
        path = Path(entry).resolve() if entry else None
        if path is None or not path.is_dir() or path == cwd or path == root:
            continue
        if path not in folders:
            folders.append(path)
    return folders


def scratch_on_import_path() -> Path | None:
    """The temporary folder, where every run writes, when it is (or is under) a folder the grader trusts: a script
    run from there, or PYTHONPATH naming it, puts it on sys.path. Runs would import from where runs write, and
    the grader's own scratch files would read as tampering, so no check can be made."""
    scratch = Path(tempfile.gettempdir()).resolve()
    for folder in trusted_folders():
        if scratch == folder or folder in scratch.parents:
            return folder
    return None


# Folders under a trusted folder that no verdict reads: git's own files (an instructor's `git clone` of the
# checkout hard-links .git/objects, which changes those files' ctime and nothing a grading imports or reads).
UNWATCHED_FOLDERS = frozenset({".git"})


def _ctime_after(since_ns: int, folders: list[Path], changed: Callable[[str], bool], limit: int):
    """Walk ``folders`` (no .git) and yield each file or folder whose ctime is after ``since_ns`` and that
    ``changed`` confirms, at most ``limit`` of them."""
    found = 0
    stack = [str(f) for f in folders]
    seen_roots = set()
    while stack and found < limit:
        current = stack.pop()
        try:
            info = os.stat(current, follow_symlinks=False)
        except OSError:
            continue
        if current in seen_roots:
            continue
        seen_roots.add(current)
        if info.st_ctime_ns > since_ns and changed(current):
            found += 1
            yield current
        try:
            entries = os.scandir(current)
        except OSError:
            continue
        with entries:
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    if entry.name not in UNWATCHED_FOLDERS:
                        stack.append(entry.path)
                elif st.st_ctime_ns > since_ns and changed(entry.path):
                    found += 1
                    yield entry.path
                    if found >= limit:
                        break


def _content(path: str) -> str | None:
    """What a file holds, as a digest (a symlink: where it points; a folder: its entries' names); None if unreadable."""
    try:
        mode = os.stat(path, follow_symlinks=False).st_mode
        if stat.S_ISLNK(mode):
            return "link " + os.readlink(path)
        if stat.S_ISDIR(mode):
            return "folder " + "\0".join(sorted(e for e in os.listdir(path) if e not in UNWATCHED_FOLDERS))
        if not stat.S_ISREG(mode):
            return f"kind {stat.S_IFMT(mode):o}"
        with open(path, "rb") as handle:
            return "sha256 " + hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return None


def _installed_digests(folder: Path) -> dict[str, str]:
    """The sha256 pip recorded of each file it installed under a site-packages ``folder`` (its *.dist-info/RECORD
    files: ``path,sha256=<urlsafe base64>,size``), by absolute path."""
    import base64
    import csv

    out: dict[str, str] = {}
    for record in folder.glob("*.dist-info/RECORD"):
        try:
            rows = list(csv.reader(record.read_text().splitlines()))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        for row in rows:
            if len(row) >= 2 and row[1].startswith("sha256="):
                raw = row[1][len("sha256="):]
                try:
                    digest = base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)).hex()
                except ValueError:
                    continue
                out[os.path.normpath(os.path.join(folder, row[0]))] = "sha256 " + digest
    return out


class TrustedFiles:
    """The files a verdict rests on (trusted_folders(); .git, which nothing graded reads, left out), watched
    while a check runs: a file or folder whose content changed, or that appeared, is tampering, and the verdict
    is withheld. A change of metadata alone voids nothing: a hard link to a file (an instructor's `git clone`
    of the checkout, uv's installs), `touch`, a chmod.

    At the start the checkout's trusted folders (checker/, chapters/, solutions/: small) are read whole, as
    digests and folder listings. At the end one walk finds every file and folder whose ctime (which no process
    can set) moved since the start, as before; each is then compared by content with what it held: the checkout's
    with the digests taken at the start, an installed package's file with the sha256 pip recorded of it
    (*.dist-info/RECORD). One with nothing to compare with (a new file, the standard library, a .pyc) counts as
    changed, as a ctime alone did. Reading the Python environment whole each check would take minutes (GBs of
    CUDA libraries): only what moved is read."""

    def __init__(self, folders: list[Path], checkout: list[Path] | None = None):
        self.since_ns = time.time_ns()
        self.folders = folders
        if checkout is None:  # the workbook's own folders, never a virtual environment kept in the checkout
            checkout = [f for f in folders if f in checkout_folders()]
        self.known: dict[str, str | None] = {}
        for folder in checkout:
            for current, dirs, files in os.walk(folder):
                dirs[:] = [d for d in dirs if d not in UNWATCHED_FOLDERS]
                for name in (current, *(os.path.join(current, f) for f in files),
                             *(os.path.join(current, d) for d in dirs if os.path.islink(os.path.join(current, d)))):
                    self.known[name] = _content(name)
        self._installed: dict[str, str] | None = None

    def _reference(self, path: str) -> str | None:
        if path in self.known:
            return self.known[path]
        if self._installed is None:
            self._installed = {}
            for folder in self.folders:
                if folder.name in ("site-packages", "dist-packages"):
                    self._installed.update(_installed_digests(folder))
        return self._installed.get(os.path.normpath(path))

    def _changed(self, path: str) -> bool:
        reference = self._reference(path)
        return reference is None or _content(path) != reference

    def changed(self, limit: int = 5) -> list[str]:
        """What changed in content since this was made (at most ``limit``): paths."""
        return list(_ctime_after(self.since_ns, self.folders, self._changed, limit))
