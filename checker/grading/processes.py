"""Linux process bookkeeping for the grader: die with the parent, adopt orphans, find and kill what is left.

A graded submission may start processes that outlive its runs (a forked child, a daemon). The grader makes
itself a *child subreaper* (prctl PR_SET_CHILD_SUBREAPER), so such orphans are re-parented to it rather than
to init, where it can still find them (by walking /proc) and kill them.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def _prctl(option: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux
        return False


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when the thread that started it ends."""
    return _prctl(PR_SET_PDEATHSIG, int(sig))


def become_subreaper() -> bool:
    return _prctl(PR_SET_CHILD_SUBREAPER, 1)


def _stat(pid: int) -> tuple[int, str] | None:
    """(parent pid, state letter) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            text = handle.read().decode("ascii", "replace")
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[1]), fields[0]


def children(pid: int) -> list[int]:
    """Live (not zombie) children of ``pid``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            info = _stat(int(entry))
            if info is not None and info[0] == pid and info[1] != "Z":
                found.append(int(entry))
    return found


def descendants(pid: int) -> list[int]:
    found, frontier = [], [pid]
    while frontier:
        nxt = []
        for parent in frontier:
            nxt += children(parent)
        found += nxt
        frontier = nxt
    return found


def reap(pid: int) -> None:
    """Collect the exit status of a child of this process, if it is one (ignored otherwise)."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def kill_quietly(pid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        pass


def kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(root: int, spare: frozenset[int] = frozenset(), rounds: int = 20) -> int:
    """SIGKILL every descendant of ``root`` except the subtrees in ``spare``; repeat while new orphans appear
    (a killed process's children are re-parented to the subreaper). Returns how many processes were killed."""
    killed: set[int] = set()
    for _ in range(rounds):
        victims = [pid for pid in _descendants_sparing(root, spare) if pid not in killed]
        if not victims:
            break
        for pid in victims:
            kill_quietly(pid)
            killed.add(pid)
        time.sleep(0.05)
        for pid in victims:
            reap(pid)
    for pid in list(killed):
        reap(pid)
    return len(killed)


def _descendants_sparing(root: int, spare: frozenset[int]) -> list[int]:
    found, frontier = [], [root]
    while frontier:
        nxt = []
        for parent in frontier:
            nxt += [pid for pid in children(parent) if pid not in spare]
        found += nxt
        frontier = nxt
    return found


def is_alive(pid: int) -> bool:
    info = _stat(pid)
    return info is not None and info[1] != "Z"


def wait_gone(pids: list[int], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while any(is_alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)


