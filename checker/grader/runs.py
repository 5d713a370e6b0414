"""Run one chapter script in a process of its own, and measure it from outside.

The grader's half of the protocol (the candidate's half is ``checker.candidate``). The grader:

* makes the run's private folder and environment (``checker.grader.sandbox``) and starts the script there;
* sends the run's seed, and the window key when the script says the window opens;
* stamps every message on its own clock as it arrives: the timed window runs from "the window opens" to
  "the trained weights have arrived", so work moved after the window is still inside it and work done before
  it cannot produce the right weights (they depend on the window key);
* keeps the weights, and a torch.profiler trace, as the run sent them over the channel: it never reads a file
  the run wrote (nsys's report is written by nsys, after the run's process ended); the checks believe a trace
  only when it lines up with the steps stamped here;
* watches the run: a time limit, an output cap (only the last lines are kept), the worker processes alive
  when the window opens and closes, and every process the run leaves behind, killed and counted.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import subprocess
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checker.grader import compile_cache as compile_caches
from checker.grader import forkserver
from checker.grader import sandbox
from checker.base.chapters import Chapter, probe_updates
from checker.base.scan import scan_flags
from checker.base.errors import WorkbookError
from checker.base.paths import display_path
from checker.base.tools import require_tool
from checker.trace.nsys import export_report

OUTPUT_CAP = 16 * 1024 * 1024  # bytes a run may print before it is stopped
OUTPUT_TAIL = 64 * 1024  # bytes of the end of its output kept for messages
HEADER_CAP = 64 * 1024  # one message line
WEIGHTS_CAP = 2 * 1024**3  # bytes of weights a run may send
# the messages the harness sends with raw bytes after their line (checker.candidate.session): everything else is one line
PAYLOAD_KINDS = frozenset({"samples", "weights", "trace", "probed"})
CPU_MEMORY_MB = 6144  # memory a CPU run's process may use unless chapter.toml says (memory_mb)


class ScriptError(WorkbookError):
    """The candidate script crashed, hung or broke the protocol: reported as one line, exit 2."""


class IncompleteWork(Exception):
    """The script ran but left the step loop early: its work differs from the baseline's (a failed check)."""


@dataclass
class RunResult:
    script: Path
    samples_per_s: float | None
    samples: int
    window_s: float | None  # on the grader's clock: window opened -> trained weights arrived
    step_ms: list[float]  # on the grader's clock: one per timed step
    seed: int
    window_key: int
    weights: bytes | None = field(default=None, repr=False)
    raw: dict[str, Any] = field(default_factory=dict, repr=False)  # what the run said about itself (untrusted)
    trace_file: Path | None = None
    copy: Path | None = None  # the run's copy of the script: traces and errors name it, reports name the original
    phases_s: dict[str, float] = field(default_factory=dict)
    trace_first_step: int | None = None  # the first step its trace records (None: no trace)
    trace_stamps_ns: list[int] = field(default_factory=list, repr=False)  # grader clock: traced step starts, then end
    steps: int = 0  # steps the run made, warm-up included
    workers_at_first_step: set[int] = field(default_factory=set)  # processes under the run, by pid (sandbox.worker_processes)
    workers_at_close: set[int] = field(default_factory=set)
    # of those, multiprocessing's forkserver and resource tracker (sandbox.multiprocessing_helpers): no data workers
    multiprocessing_helpers: set[int] = field(default_factory=set)
    # CPU ns in the timed window: the run's own process, and every other process under it (sandbox.cpu_of_run)
    window_cpu_ns: tuple[int, int] | None = None
    # the same after the window: the run's own process from the harness's hand-back (the trace sent) to the outcome,
    # the script's own code after its loop and session.finish(); every other process from the moment the steps were
    # over and the harness had stopped the loader's workers (their prefetch and their exit are no step's work; what
    # else runs under the script while the harness exports its trace is counted) (a CPU run; None: not read)
    after_cpu_ns: tuple[int, int] | None = None
    # a rank of a job on a CPU: its own process's CPU ns as the grader read it when each window step began and when the
    # window closed (checker.grader.sandbox.own_cpu_ns): what each step cost it, step by step
    step_cpu_ns: list[int] = field(default_factory=list)
    # (ns blocked, ns in all) of the stepping thread in the window outside its fetches, then (ns blocked, ns in all)
    # inside them, from the kernel's scheduler statistics as the harness read them
    # (checker.candidate.session.Session._add_blocked); None: not read
    window_blocked_ns: tuple[int, int, int, int] | None = None
    survivors: int = 0  # processes the run left behind, killed by the grader
    output_tail: str = ""
    reports: dict[str, float] = field(default_factory=dict)  # numbers the run claimed (session.report): untrusted
    forked: bool = False  # started by the fork server (its start-up had torch imported already)
    # a rank of a data-parallel job (checker.grader.ranks): the positions of the samples it read in each timed step
    # (its claim, as int64 bytes: epoch * len(dataset) + position), and how many in each step
    sample_ids: bytes | None = field(default=None, repr=False)
    sample_counts: list[int] = field(default_factory=list, repr=False)
    # (window batches compared, how many were not their keys' finished samples): checker.candidate.session.Finished
    finished_batches: tuple[int, int] | None = None
    # numpy arrays over a tensor's memory the process held after the window (a CPU run of a chapter that counts host
    # reads): checker.candidate.session.tensor_views
    tensor_views: int | None = None
    # shared objects the run mapped from where it may write (a CPU run in a chapter that counts host reads):
    # checker.candidate.session.native_code_of_its_own
    native_code: tuple[str, ...] = ()
    # the outermost loops of the C++ Inductor generated for the run (every module once; the same runs):
    # checker.candidate.session.loop_nests
    compiled_loop_nests: int | None = None
    # (how many, where the first were caught) errors ops raised in the window's steps (not logging steps) of a CPU run
    # that counts host reads: checker.candidate.session.op_errors
    op_errors: tuple[int, tuple[str, ...]] = (0, ())
    marks_ns: dict[str, int] = field(default_factory=dict, repr=False)  # the grader's clock at each message
    # the window steps whose updates the referee checks (probe_updates: drawn by the grader after the window), and
    # the model's trainable tensors around each, as the harness sent them (checker.candidate.session.UpdateProbe)
    probe_steps: list[int] = field(default_factory=list)
    update_probe: bytes | None = field(default=None, repr=False)
    ranks: list["RunResult"] = field(default_factory=list, repr=False)  # a job of several ranks: every rank's run
    rank_weight_gap: float | None = None  # a job: how far the ranks' trained weights are apart (0: identical)


# (name, from mark, to mark): where the seconds of one run went, on the grader's clock
PHASES = (
    ("start-up", "spawn", "hello"),           # Python, torch and the checker imported (nsys starting, when tracing)
    ("build", "hello", "built"),              # the chapter's workload
    ("setup", "built", "first_step"),         # the script's own setup (model, optimizer, DataLoader)
    ("warm-up", "first_step", "open"),        # untimed steps: torch.compile, autotuning, workers starting
    ("timed", "open", "weights"),             # the timed window, the trained weights' transfer included
    ("after", "weights", "done"),             # trace export (and the traced steps after the window), the rest
    ("exit", "done", "exit"),                 # the process stopped (or, under nsys or ncu, ending and writing its report)
)


def phases(clock: dict[str, int]) -> dict[str, float]:
    """Seconds per phase of one run, from the grader's time.monotonic_ns() marks."""
    return {name: round((clock[b] - clock[a]) / 1e9, 2) for name, a, b in PHASES if a in clock and b in clock}


def describe_phases(seconds: dict[str, float]) -> str:
    return ", ".join(f"{name} {value:.1f}" for name, value in seconds.items())


class _Protocol:
    """Reads the run's messages, stamps them, answers them. Anything out of order ends the run."""

    def __init__(self, run: "_Run"):
        self.run = run
        self.buffer = bytearray()
        self.payload_for: dict | None = None
        self.payload_left = 0
        self.payload = bytearray()

    def feed(self, data: bytes, now: int) -> None:
        self.buffer += data
        while self.buffer:
            if self.payload_for is not None:
                take = min(self.payload_left, len(self.buffer))
                self.payload += self.buffer[:take]
                del self.buffer[:take]
                self.payload_left -= take
                if self.payload_left:
                    return
                header, self.payload_for = self.payload_for, None
                self.run.on_message(header, bytes(self.payload), now)
                self.payload = bytearray()
                continue
            end = self.buffer.find(b"\n")
            if end < 0:
                if len(self.buffer) > HEADER_CAP:
                    raise self.run.broken("sent a message line longer than the grader reads")
                return
            line = bytes(self.buffer[:end])
            del self.buffer[:end + 1]
            try:
                header = json.loads(line)
                kind = header["type"]
            except (ValueError, KeyError, TypeError):
                raise self.run.broken("sent something that is not a message of the harness") from None
            if not isinstance(kind, str):
                raise self.run.broken("sent something that is not a message of the harness")
            if "nbytes" in header:
                if kind not in PAYLOAD_KINDS:  # raw bytes after any other line would swallow the harness's next lines
                    raise self.run.broken(f"sent a {kind!r} message with bytes after it; only "
                                          f"{', '.join(sorted(PAYLOAD_KINDS))} carry bytes")
                size = header["nbytes"]
                if not isinstance(size, int) or not 0 <= size <= WEIGHTS_CAP:
                    raise self.run.broken(f"announced {size!r} bytes of weights (at most {WEIGHTS_CAP} accepted)")
                self.payload_for, self.payload_left = header, size
                continue
            self.run.on_message(header, None, now)


def _listed(header: dict, fallback: str, width: int = 60, count: int = 5, sep: str = ", ") -> str:
    """A step guard's list of what it found (``header["what"]``), each cut to ``width`` characters, as one line."""
    what = header.get("what")
    return sep.join(str(w)[:width] for w in what[:count]) if isinstance(what, list) and what else fallback


class _Run:
    def __init__(self, chapter: Chapter, script: Path, device: str, total_steps: int, warmup: int, seed: int,
                 window_key: int, folder: sandbox.RunFolder, display: str, tail: int = 0, watch_cpu: bool = False,
                 wrapped: bool = False, step_cpu: bool = False):
        self.chapter, self.script, self.device, self.display = chapter, script, device, display
        # a profiler (nsys, ncu) started the harness's process: the run's own process is the profiler's, and the
        # harness's is the one process under it that held the channel's pipe when the harness said hello
        self.wrapped = wrapped
        self.harness_pid: int | None = None
        # read every process's CPU time under the run at the window's open and close: only where a check uses it
        # (a CPU run traced by torch.profiler: checker.grader.collect.elsewhere), never in a timed GPU run
        self.watch_cpu = watch_cpu
        # and the run's own process's CPU at each window step's start (a rank of a job on a CPU: chapter 09's straggler)
        self.step_cpu = step_cpu
        self.step_cpu_ns: list[int] = []
        self.total_steps, self.warmup = total_steps, warmup
        self.tail = tail  # steps traced after the window (--trace-tail)
        self.tail_stamps: list[int] = []
        self.seed, self.window_key = seed, window_key
        self.folder = folder
        self.clock: dict[str, int] = {}
        self.step_stamps: list[int] = []
        self.expected_step = warmup
        self.weights: bytes | None = None
        self.trace_bytes: bytes | None = None  # the torch.profiler trace, as the harness sent it at export
        self.outcome: dict | None = None
        self.ctl: int | None = None
        self.pid: int | None = None
        self.workers_at_first_step: set[int] = set()
        self.workers_at_close: set[int] = set()
        self.multiprocessing_helpers: set[int] = set()
        self.cpu_at_open: tuple[int, int] | None = None
        self.cpu_at_close: tuple[int, int] | None = None
        self.cpu_at_resume: int | None = None  # its own process's, when the harness handed the script its code back
        self.cpu_at_done: tuple[int, int] | None = None
        self.cpu_at_stopped: tuple[int, int] | None = None  # when the steps were over and the loader's workers stopped
        self.known: set[int] = set()  # this grader's processes before the run started (its fork server)
        self.reports: dict[str, float] = {}
        self.sample_ids: bytes | None = None
        self.sample_counts: list[int] = []
        self.finished: tuple[int, int] | None = None
        self.views: int | None = None
        self.blocked: tuple[int, int, int, int] | None = None
        self.native: tuple[str, ...] = ()
        self.loop_nests: int | None = None
        self.op_errors: tuple[int, tuple[str, ...]] = (0, ())
        self.evt_fd: int | None = None  # the descriptor the harness writes its messages through (its hello says)
        # the window steps whose updates are checked: drawn when the harness asks, after the window (probe_updates)
        self.probes = probe_updates(chapter.config(device))
        self.probe_steps: list[int] | None = None
        self.update_probe: bytes | None = None

    def _none_left(self) -> None:
        """The window's CPU is counted over the processes under the run: one that left it (an orphan this grader
        adopted) works where no count and no trace looks (red team 36's orphan_key_04 trained the window in a process
        whose launcher exited in warm-up, while the traced process ran a decoy)."""
        if left := sandbox.adopted(self.pid, self.known):
            raise self.broken(f"left {len(left)} process{'es' if len(left) > 1 else ''} running outside the run "
                              "(orphaned, adopted by the grader): the window's work is counted over the run's "
                              "processes, so work done in one that left it is in no count and no trace")

    def _pipe_holders(self) -> list[tuple[int, int]] | None:
        """(pid, descriptor) for every hold of the grader's pipe by a process under the run; None where the pipe is
        gone or the run has not started."""
        if self.pid is None:
            return None
        try:
            pipe = os.stat(self.folder.path / "evt")
        except OSError:
            return None
        holders = []
        for pid in {self.pid} | sandbox.descendants(self.pid):
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                try:
                    there = os.stat(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if (there.st_dev, there.st_ino) == (pipe.st_dev, pipe.st_ino):
                    holders.append((pid, int(fd)))
        return holders

    def _channel_kept(self) -> bool:
        """Whether the harness's process (the run's own, or under a profiler the one that held the pipe at hello) still
        holds the grader's pipe at the descriptor the harness announced, and no process under the run holds it at
        another (a relay between the harness and the pipe holds it elsewhere)."""
        holders = self._pipe_holders()
        if self.evt_fd is None or self.harness_pid is None or holders is None:
            return False
        return (self.harness_pid, self.evt_fd) in holders and all(fd == self.evt_fd for _, fd in holders)

    def _channel_holder(self) -> int | None:
        """The one process under the run that holds the grader's pipe at the descriptor the hello named (a profiler's
        run: the harness's process, which the profiler started), or None where none or several do."""
        holders = [pid for pid, fd in self._pipe_holders() or () if fd == self.evt_fd]
        return holders[0] if self.evt_fd is not None and len(holders) == 1 else None

    def broken(self, what: str) -> ScriptError:
        return ScriptError(f"{self.display} {what}; the grader stopped it")

    def _answer(self, message: dict) -> None:
        data = json.dumps(message).encode() + b"\n"
        os.write(self.ctl, data)

    def on_message(self, header: dict, payload: bytes | None, now: int) -> None:
        kind = header["type"]
        order = ("hello", "built", "first_step", "open", "close", "weights")
        if kind in order:
            if kind in self.clock:
                raise self.broken(f"said '{kind}' twice")
            needed = order[:order.index(kind)]
            missing = [k for k in needed if k not in self.clock]
            if missing:
                raise self.broken(f"said '{kind}' before '{missing[0]}'")
            self.clock[kind] = now
        if kind == "hello":
            fd = header.get("fd")
            self.evt_fd = fd if isinstance(fd, int) and not isinstance(fd, bool) and fd >= 0 else None
            self.harness_pid = self._channel_holder() if self.wrapped else self.pid
            self.ctl = os.open(self.folder.path / "ctl", os.O_RDWR)
            self._answer({"seed": self.seed})
        elif kind == "open":
            # step_acks: the harness waits for an answer to each window step's message, so that the CPU read there
            # (step_cpu) is the step's boundary, not wherever the rank had run to by the time this process read it
            # (on a loaded machine, however long this process took to get to the message)
            self._answer({"window_key": self.window_key, **({"step_acks": True} if self.step_cpu else {})})
            if self.watch_cpu:  # after the answer: the run's window is not held up by the reading
                self._none_left()
                self.cpu_at_open = sandbox.cpu_of_run(self.pid)
        elif kind == "step":
            in_tail = "tail" in self.clock and "tail_close" not in self.clock
            if (not in_tail and ("open" not in self.clock or "close" in self.clock)) \
                    or header.get("n") != self.expected_step:
                raise self.broken(f"reported step {header.get('n')!r} where the harness is at step {self.expected_step}")
            (self.tail_stamps if in_tail else self.step_stamps).append(now)
            self.expected_step += 1
            if self.step_cpu and not in_tail:
                self.step_cpu_ns.append(sandbox.own_cpu_ns(self.harness_pid or self.pid))
                self._answer({"step": header["n"]})
        elif kind == "tail":
            if not self.tail or "weights" not in self.clock or "tail" in self.clock:
                raise self.broken("began traced steps after the window out of turn")
            self.clock["tail"] = now
        elif kind == "tail_close":
            if "tail" not in self.clock or "tail_close" in self.clock \
                    or self.expected_step != self.total_steps + self.tail:
                raise self.broken(f"ended the traced steps after step {self.expected_step - 1}, not "
                                  f"{self.total_steps + self.tail - 1}")
            self.clock["tail_close"] = now
            self.tail_stamps.append(now)
        elif kind == "close":
            if self.expected_step != self.total_steps:
                raise self.broken(f"closed the window after step {self.expected_step - 1}, not {self.total_steps - 1}")
            if not self._channel_kept():  # the window's stamps are the arrivals of its messages: they came straight
                raise self.broken("sent the window's messages through something other than the channel it was given "
                                  "(the descriptor the harness opened to the grader's pipe, or another one, is not "
                                  "where it was): their arrival times are not the steps'")
            self.step_stamps.append(now)
            blocked = header.get("blocked")
            self.blocked = tuple(blocked) if isinstance(blocked, list) and len(blocked) == 4 \
                and all(isinstance(n, int) and n >= 0 for n in blocked) else None
            below = sandbox.descendants(self.pid)
            self.workers_at_close = sandbox.worker_processes(below)
            self.multiprocessing_helpers |= sandbox.multiprocessing_helpers(self.workers_at_close)
            if self.step_cpu:
                self.step_cpu_ns.append(sandbox.own_cpu_ns(self.harness_pid or self.pid))
            if self.watch_cpu:
                self._none_left()
                self.cpu_at_close = sandbox.cpu_of_run(self.pid, below)
        elif kind == "weights":
            self.weights = payload
        elif kind == "samples":
            counts = header.get("counts")
            if "close" not in self.clock or "weights" in self.clock or self.sample_ids is not None or payload is None \
                    or not isinstance(counts, list) or not all(isinstance(c, int) and c >= 0 for c in counts) \
                    or sum(counts) * 8 != len(payload):
                raise self.broken("sent its samples out of turn or malformed")
            self.sample_ids, self.sample_counts = payload, counts
        elif kind == "finished":
            checked, unfinished = header.get("checked"), header.get("unfinished")
            if "weights" not in self.clock or self.finished is not None or not all(
                    isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in (checked, unfinished)) \
                    or unfinished > checked:
                raise self.broken("sent its finished batches out of turn or malformed")
            self.finished = (checked, unfinished)
        elif kind == "views":
            count = header.get("count")
            if "weights" not in self.clock or self.views is not None or not isinstance(count, int) \
                    or isinstance(count, bool) or count < 0:
                raise self.broken("sent its count of numpy views out of turn or malformed")
            native, errors = header.get("native", []), header.get("errors", [])
            error_count, nests = header.get("error_count", 0), header.get("loop_nests", 0)
            if not isinstance(nests, int) or isinstance(nests, bool) or nests < 0:
                raise self.broken("sent its count of numpy views out of turn or malformed")
            if not isinstance(native, list) or not all(isinstance(path, str) for path in native) \
                    or not isinstance(errors, list) or not all(isinstance(where, str) for where in errors) \
                    or not isinstance(error_count, int) or isinstance(error_count, bool) or error_count < len(errors):
                raise self.broken("sent its count of numpy views out of turn or malformed")
            self.views, self.native, self.loop_nests = count, tuple(native), nests
            self.op_errors = (error_count, tuple(where[:300] for where in errors))
        elif kind == "probe":
            if not self.probes or "weights" not in self.clock or self.probe_steps is not None:
                raise self.broken("asked which updates are checked out of turn")
            self.probe_steps = draw_probe_steps(self.warmup, self.total_steps, self.probes)
            self._answer({"steps": self.probe_steps})
        elif kind == "probed":
            if self.probe_steps is None or self.update_probe is not None or payload is None:
                raise self.broken("sent the tensors of its updates out of turn")
            self.update_probe = payload
        elif kind == "trace":
            if "weights" not in self.clock or (self.tail and "tail_close" not in self.clock) \
                    or self.trace_bytes is not None or payload is None:
                raise self.broken("sent a trace out of turn")
            if not self._channel_kept():
                raise self.broken("sent its trace through something other than the channel it was given (the "
                                  "descriptor the harness opened to the grader's pipe, or another one, is not "
                                  "where it was): what arrived is not what the harness wrote")
            self.trace_bytes = payload
            self._answer({"type": "trace_read"})  # the harness waits for this before it runs the script's code again
        elif kind == "replaced":
            shown = _listed(header, "the harness's code", width=80)
            raise self.broken(f"replaced what the harness writes its trace with ({shown})")
        elif kind == "reads":
            shown = _listed(header, "the harness's code", width=80)
            raise self.broken(f"replaced what the harness reads the trained weights with ({shown}): code run there "
                              "trains after the last step's range has closed, where no step's trace looks")
        elif kind == "switched":
            calls, first = header.get("calls"), str(header.get("first"))[:40]
            raise self.broken(f"switched what PyTorch's profiler records ({calls} call(s), the first of {first}): "
                              "ops then ran where no trace records them, so the trace is not the run's")
        elif kind == "shared":
            shown = _listed(header, "the model's weights")
            raise self.broken(f"put the model's weights where another process can train them ({header.get('count')} "
                              f"tensor(s) in shared memory: {shown}): the traced process must do its own training")
        elif kind == "named":
            shown = _listed(header, "its code", width=80)
            raise self.broken(f"made code named like the grader's own ({shown}): a trace tells the grader's code "
                              "(checker/, a chapter's workload.py) from the script's by the file its frames name, so "
                              "such code would be taken for the grader's")
        elif kind == "loaded":
            shown = _listed(header, "its code", width=300, count=3, sep="; ")
            raise self.broken(f"loaded code from a file of its own that the scan refuses ({shown}): the scan reads "
                              "every file a run loads code from, not only the script")
        elif kind == "fusion":
            shown = _listed(header, "its settings")
            raise self.broken(f"changed how Inductor fuses ({shown}): on a CPU a compiled graph's kernels record no "
                              "op, so this chapter counts each compiled graph's call as one pass, which holds only for "
                              "torch.compile's own fusion; compile with torch.compile(model) (a mode= is fine)")
        elif kind == "interpreter":
            shown = _listed(header, "TorchScript")
            raise self.broken(f"ran TorchScript ({shown}) in a chapter that counts host reads: its interpreter reads "
                              "a tensor's values (prim::tolist) with no op a CPU trace records; a lab never needs it")
        elif kind == "unpickled":
            shown = _listed(header, "the calls")
            raise self.broken(f"had a loader worker's batch unpickled in the training process by calling {shown}: "
                              "unpickling runs that code in the training process, not in a worker, where no op or "
                              "frame of the script's shows it; have the workers send finished tensors (plain "
                              "containers of them)")
        elif kind == "rpc":
            raise self.broken("ran a torch.distributed.rpc agent: the ranks' exchanges are counted in torch.distributed's "
                              "collectives (allreduce_rounds), and RPC carries tensors between the ranks where no "
                              "count looks; exchange them with DDP or torch.distributed's collectives")
        elif kind == "untraced":
            raise self.broken("replaced the harness's tracer (sys.settrace) in a chapter that counts host reads: on a "
                              "CPU it counts the errors ops raise in a step, each a bit of a tensor's value read "
                              "with no op a trace records")
        elif kind == "warnings":
            shown = _listed(header, "the warning display")
            raise self.broken(f"replaced Python's warning display ({shown}) in a chapter that counts host reads: a "
                              "warning an op raises on some values is a bit of them, and on a CPU the harness counts "
                              "the warnings shown in a step through the standard display")
        elif kind == "harness":
            shown = _listed(header, "its code")
            raise self.broken(f"changed the harness's session ({shown}): the harness's own code marks, times and "
                              "traces the steps, and code put in its place runs where no step's trace looks")
        elif kind == "first_step":
            self.workers_at_first_step = sandbox.worker_processes(sandbox.descendants(self.pid))
            self.multiprocessing_helpers |= sandbox.multiprocessing_helpers(self.workers_at_first_step)
        elif kind == "built":
            pass
        elif kind == "report":
            name, value = header.get("name"), header.get("value")
            if not isinstance(name, str) or len(name) > 64 or isinstance(value, bool) or not isinstance(value, (int, float)):
                raise self.broken("sent a report that is not a name and a number")
            if name not in self.reports and len(self.reports) >= 32:
                raise self.broken("sent more than 32 reports")
            self.reports[name] = float(value)
        elif kind == "stopped":  # the steps are over and the loader's workers stopped (checker.candidate.session)
            if "weights" not in self.clock or "stopped" in self.clock or (self.tail and "tail_close" not in self.clock):
                raise self.broken("said its steps were over out of turn")
            self.clock["stopped"] = now
            if self.watch_cpu:
                self.cpu_at_stopped = sandbox.cpu_of_run(self.pid)
        elif kind == "resumed":
            if "stopped" not in self.clock or "resumed" in self.clock:
                raise self.broken("said its window was over out of turn")
            self.clock["resumed"] = now
            if self.watch_cpu:
                self.cpu_at_resume = sandbox.own_cpu_ns(self.pid)  # the others are read from "stopped"
        elif kind in ("done", "error", "incomplete"):
            if self.outcome is not None:
                raise self.broken("reported its outcome twice")
            self.outcome = header
            self.clock["done"] = now
            if self.watch_cpu and self.cpu_at_resume is not None:
                self.cpu_at_done = sandbox.cpu_of_run(self.pid)
        else:
            raise self.broken(f"sent an unknown message '{kind}'")


def draw_probe_steps(warmup: int, end: int, count: int) -> list[int]:
    """``count`` window steps, drawn afresh for each run, whose updates the referee checks: each needs the tensors
    of the step before it, which the harness keeps for the window's first step too (red team 65's firsthalf_07 trained
    that step, never drawn, on half its batch)."""
    steps = list(range(max(warmup, 1), end))  # (a run with no warm-up has no step before its first)
    return sorted(secrets.SystemRandom().sample(steps, min(count, len(steps))))


def nsys_profile(nsys: str, report: Path) -> list[str]:
    """The nsys command line a traced run starts under, up to the run's own command.

    ``--cuda-graph-trace=node``: a CUDA graph's replays are traced kernel by kernel, so the checks that count
    kernels (elementwise_kernels, launches_per_step's kernels in all) see what a graph ran, not one bar per replay
    (nsys's default, which checker.trace.nsys reads as GPU time only), as torch.profiler's traces do: a submission
    cannot hide its kernels in a graph (tests/redteam/gpu/graph_hide_05 is the cheat that tries).
    """
    return [nsys, "profile", "-t", "cuda,nvtx,osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
            "--cuda-graph-trace=node", "--force-overwrite=true", "-o", str(report)]


def new_secret() -> tuple[int, int]:
    """A fresh secret for one run, or one pair of runs: its seed and its window key (checker.base.workloads)."""
    return secrets.randbelow(2**31 - 1) + 1, secrets.randbelow(2**31 - 1) + 1


def run_script(
    chapter: Chapter,
    script: Path,
    device: str,
    *,
    steps: int | None = None,
    trace: str | None = None,
    workdir: Path | None = None,
    extra_args: list[str] | None = None,
    seed: int = 0,
    window_key: int = 1,
    display: str | None = None,
    profiler: tuple[str, str, list[str]] | None = None,
    compile_cache: "compile_caches.Claim | None" = None,
    trace_tail: int = 0,
    extra_env: dict[str, str] | None = None,
) -> RunResult:
    """Run ``script`` for ``chapter`` on ``device`` in a fresh, private process, measured from outside.

    ``trace`` is None, "torch" (torch.profiler over the window, written by the run) or "nsys" (the process
    runs under ``nsys profile --capture-range=cudaProfilerApi``; the report is exported to SQLite).
    ``profiler``: ("ncu", path to ncu, its options): the process runs under Nsight Compute, whose report (in the
    run's folder) becomes the result's ``trace_file``. ``compile_cache``: torch.compile's caches of this
    script's earlier runs (checker.grader.compile_cache), put in place before the run and copied back after it.
    ``trace_tail`` (with ``trace="torch"``): the trace records that many steps after the window, in the same process,
    instead of the window: one run both timed and traced. A run is stopped as soon as it has said it is done (its exit and its workers' shutdown are not waited for),
    unless a profiler around it writes its report when the process ends.
    """
    cfg = chapter.config(device)
    total_steps = int(steps if steps is not None else cfg["steps"])
    warmup = min(int(cfg.get("warmup", 0)), total_steps)
    timeout = float(os.environ.get("WORKBOOK_TIMEOUT_S") or cfg.get("timeout_s", 300))
    display = display or display_path(script)
    if workdir is None:
        workdir = sandbox.check_folder()
    identity = sandbox.run_identity()
    folder = sandbox.RunFolder.create(workdir, script, identity)
    traced_after = trace_tail if trace == "torch" else 0
    # the script is told one number of steps, the traced tail's included: where the window ends is the harness's
    # to know (from --trace-tail), so nothing the script reads tells a timed step from a traced one
    script_args = ["--device", device, "--steps", str(total_steps + traced_after)] + list(extra_args or [])
    launch_args = ["--channel", str(folder.path), "--script", str(folder.script)]
    if os.environ.get("WORKBOOK_SCAN") != "0":  # the scan the grader ran over the script, over what else it loads
        on = {**scan_flags(spec.name for spec in chapter.checks), "cuda": device == "cuda"}
        flags = [flag for flag, wanted in on.items() if wanted]
        launch_args += ["--scan-loaded", ",".join(flags) or "plain"]
    trace_file = None
    if trace == "torch":
        trace_file = folder.path / "trace.json.gz"
        launch_args += ["--trace", "torch", "--trace-out", str(trace_file)]
        if traced_after:
            launch_args += ["--trace-tail", str(traced_after)]
    command = [*sandbox.python_command(), *launch_args]
    if trace == "nsys":
        nsys = require_tool("nsys", "--trace-tool nsys")
        # nsys runs as the run's own user: started by the grader around the run, it writes its report after the
        # run's process has ended. (Run as the grader's user with the run dropped beneath it, nsys writes no
        # report.)
        report = folder.path / "trace"
        command = [*nsys_profile(nsys, report), *command]
        trace_file = report.with_suffix(".nsys-rep")
    if profiler is not None:
        _name, tool, options = profiler
        report = folder.path / "profile"
        command = [tool, *options, "-o", str(report), *command]
        trace_file = report.with_suffix(".ncu-rep")
    command += ["--", *script_args]
    launch_args += ["--", *script_args]
    limits = sandbox.Limits(memory_mb=int(cfg.get("memory_mb") or CPU_MEMORY_MB) if device == "cpu" else None)
    sandbox.become_subreaper()
    # a run no profiler must start is forked from a process that has imported torch already (forkserver.py)
    # (not a rank of a job: checker.grader.ranks starts its ranks in the job's own network namespace)
    server = forkserver.server() if trace != "nsys" and profiler is None and extra_env is None else None
    known_children = sandbox.descendants(os.getpid())
    run = _Run(chapter, script, device, total_steps, warmup, seed, window_key, folder, display, tail=traced_after,
               watch_cpu=device == "cpu", wrapped=trace == "nsys" or profiler is not None,
               step_cpu=device == "cpu" and int((extra_env or {}).get("WORLD_SIZE", "1")) > 1)
    run.known = known_children
    protocol = _Protocol(run)
    evt = os.open(folder.path / "evt", os.O_RDWR | os.O_NONBLOCK)  # RDWR: never an EOF before the run connects
    tail: deque[bytes] = deque()
    tail_bytes = printed = 0
    env = sandbox.environment(folder)
    env.update(extra_env or {})  # a rank of a job: RANK, WORLD_SIZE, MASTER_ADDR, ... (checker.grader.ranks)
    if compile_cache is not None:
        compile_cache.fill(identity)
        env.update(compile_caches.environment(compile_cache.place))
    stop_at_done = trace != "nsys" and profiler is None
    # what the run may keep beyond its own folder: nothing, where it gets private scratch places; elsewhere what it
    # leaves in them is looked for when it ends (checker.grader.sandbox.left_outside)
    keep = [str(folder.path)] + ([str(compile_cache.place)] if compile_cache is not None else [])
    # and what it reads, wherever it lives: a checkout or environment under /tmp stays where the run imports it from
    keep += [place for place in sandbox.import_places() if place not in keep]
    scratch = tuple(keep) if _private_scratch() else None
    run_uid = identity[0] if identity is not None else os.geteuid()
    ipc_before = sandbox.ipc_objects(run_uid) if scratch is None else {}  # without a namespace of its own
    began_wall_ns = time.time_ns()
    run.clock["spawn"] = time.monotonic_ns()
    held = sandbox.hold_stops()  # until the try below holds the run, whose finally ends it
    try:
        proc = _start(command, launch_args, folder, env, identity, limits, server, scratch)
    except BaseException:
        sandbox.release_stops(held)
        raise
    run.pid = proc.pid
    out = proc.stdout.fileno()
    os.set_blocking(out, False)
    deadline = time.monotonic() + timeout
    failure: ScriptError | None = None
    try:
        sandbox.release_stops(held)  # a Ctrl-C or `kill` that came while the run started is raised here
        open_fds = {evt, out}
        while True:
            if time.monotonic() > deadline:
                failure = ScriptError(
                    f"{display} did not finish within {timeout:.0f} s on {device} (the limit is timeout_s in "
                    f"{chapter.id}/chapter.toml); " + _last_words(tail, "it printed nothing"))
                break
            exited = proc.poll() is not None
            ready, _, _ = select.select(list(open_fds), [], [], 0 if exited else 0.25)
            now = time.monotonic_ns()
            for fd in ready:
                try:
                    data = os.read(fd, 1 << 20)
                except BlockingIOError:
                    continue
                if fd == out:
                    if not data:
                        open_fds.discard(out)
                        continue
                    printed += len(data)
                    tail.append(data)
                    tail_bytes += len(data)
                    while tail_bytes - len(tail[0]) >= OUTPUT_TAIL:
                        tail_bytes -= len(tail.popleft())
                    if printed > OUTPUT_CAP:
                        raise run.broken(f"printed more than {OUTPUT_CAP // 2**20} MB")
                elif data:
                    protocol.feed(data, now)
            if exited and not ready:
                break
            if stop_at_done and run.outcome is not None:
                break
    except ScriptError as err:
        failure = err
    finally:
        if proc.poll() is None:  # stopped by the grader: nothing of it may go on
            sandbox.kill_group(proc.pid)
        survivors = sandbox.kill_survivors(proc.pid, proc.pid, known_children, grace_s=0 if failure else 3.0)
        proc.wait()
        run.clock["exit"] = time.monotonic_ns()
        proc.stdout.close()
        os.close(evt)
        if run.ctl is not None:
            os.close(run.ctl)
        folder.close()
    if compile_cache is not None:
        compile_cache.empty(keep=failure is None)  # regular files only: no link is followed
    if scratch is None:
        left = sandbox.left_outside(began_wall_ns - 1_000_000_000, run_uid, [Path(p) for p in keep] + [workdir])
        ipc_left = {key: what for key, what in sandbox.ipc_objects(run_uid).items() if key not in ipc_before}
        if ipc_left:
            sandbox.remove_ipc(ipc_left)
            left += sorted(ipc_left.values())
        if left:
            sandbox.remove_left([path for path in left if path.startswith("/")])
            what = "files" if len(ipc_left) < len(left) else "System V IPC objects"
            raise WorkbookError(
                f"{display} left {what} outside its run folder ({', '.join(left)}), where a later run could read them: "
                "the verdict is withheld and they were removed. A run keeps nothing beyond its own folder "
                "(write temporary files under $TMPDIR, which is the run's own; a semaphore or shared memory a run "
                "makes must be removed before it ends)")
    if failure is not None:
        raise failure
    output = b"".join(tail).decode(errors="replace")
    outcome = run.outcome or {}
    if outcome.get("type") == "incomplete" and run.weights is None:
        raise IncompleteWork(f"work differs: {display} {outcome.get('error')}")
    if outcome.get("type") == "error":
        where = _where(outcome.get("where"), folder.script, display)
        cap = ""
        if limits.memory_mb and str(outcome.get("error", "")).startswith("MemoryError"):
            cap = f" (out of memory: each process of a run may use {limits.memory_mb} MB, memory_mb in {chapter.id}/chapter.toml"
            if trace == "torch":  # the profiler keeps each Python call of the traced steps, a compiler's included
                cap += ("; this run was traced, and the trace keeps every Python call its traced steps make: a "
                        "torch.compile that first compiles there fills gigabytes, so compile every shape in warm-up")
            cap += ")"
        raise ScriptError(f"{display} failed{where}: {outcome.get('error')}{cap}")
    if run.weights is None or outcome.get("type") != "done":
        code = proc.returncode
        how = f"was killed by signal {-code}" if code < 0 else f"exited with {code}"
        if code < 0:
            how += _crash_where(tail, folder.script, display)
        if code in (-9, -11) and limits.memory_mb:
            cause = "a crash in native code, or out of memory?" if code == -11 else "out of memory?"
            how += (f" ({cause} each process of a run may use {limits.memory_mb} MB, memory_mb in "
                    f"{chapter.id}/chapter.toml)")
        raise ScriptError(f"{display} {how} before the grader had its trained weights; "
                          + _last_words(tail, "it printed nothing"))
    if trace == "nsys":
        if not trace_file.exists():
            raise WorkbookError(f"nsys wrote no report at {trace_file}; if only a .qdstrm appeared, nsys's importer "
                                "could not run (on some systems it needs libdw.so.1)")
        trace_file = export_report(trace_file, folder.path)
    elif trace == "torch":
        if run.trace_bytes is None:
            when = "after its traced steps" if traced_after else "when the window closes"
            raise ScriptError(f"{display} sent no torch.profiler trace (the harness sends it {when})")
        # what the harness sent at export, kept where the run cannot reach: the file in the run's folder may
        # have been rewritten since, and is not read
        trace_file = sandbox.grader_folder(workdir, "trace-") / "trace.json.gz"
        trace_file.write_bytes(run.trace_bytes)
    window_ns = run.clock["weights"] - run.clock["open"]
    samples = int(outcome.get("samples") or 0)
    stamps = run.step_stamps
    return RunResult(
        script=script,
        samples_per_s=samples / (window_ns / 1e9) if window_ns > 0 else None,
        samples=samples,
        window_s=window_ns / 1e9,
        step_ms=[(b - a) / 1e6 for a, b in zip(stamps, stamps[1:])],
        seed=seed,
        window_key=window_key,
        weights=run.weights,
        raw={"loader": outcome.get("loader"), "device_name": outcome.get("device_name"), "samples": samples},
        trace_file=trace_file,
        copy=folder.script,
        phases_s=phases(run.clock),
        trace_first_step=None if trace is None else total_steps if traced_after else warmup,
        trace_stamps_ns=run.tail_stamps if traced_after else stamps,
        steps=total_steps,
        workers_at_first_step=run.workers_at_first_step,
        workers_at_close=run.workers_at_close,
        multiprocessing_helpers=run.multiprocessing_helpers,
        window_cpu_ns=(tuple(b - a for a, b in zip(run.cpu_at_open, run.cpu_at_close))
                       if run.cpu_at_open and run.cpu_at_close else None),
        after_cpu_ns=(run.cpu_at_done[0] - run.cpu_at_resume, run.cpu_at_done[1] - run.cpu_at_stopped[1])
        if run.cpu_at_resume is not None and run.cpu_at_done and run.cpu_at_stopped else None,
        window_blocked_ns=run.blocked,
        step_cpu_ns=list(run.step_cpu_ns),
        survivors=survivors,
        output_tail=output[-4000:],
        reports=dict(run.reports),
        forked=isinstance(proc, forkserver.ForkedRun),
        sample_ids=run.sample_ids,
        sample_counts=list(run.sample_counts), finished_batches=run.finished, tensor_views=run.views,
        native_code=run.native, compiled_loop_nests=run.loop_nests,
        op_errors=(run.op_errors[0], tuple(where.replace(str(folder.script), display) for where in run.op_errors[1])),
        marks_ns=dict(run.clock),
        probe_steps=list(run.probe_steps or []), update_probe=run.update_probe,
    )


def _start(command: list[str], launch_args: list[str], folder: sandbox.RunFolder, env: dict[str, str], identity,
           limits: sandbox.Limits, server: "forkserver.Server | None", scratch: tuple[str, ...] | None = None):
    """The run's process: forked by the fork server when there is one that serves, else started afresh. ``scratch``:
    the folders bound into its private scratch places (None: it shares the machine's)."""
    if server is not None:
        read, write = os.pipe()
        try:
            pid = server.spawn(launch_args, str(folder.path), env, identity, limits, _isolate_network(), write,
                               scratch=scratch)
        finally:
            os.close(write)
        if pid is not None:
            return forkserver.ForkedRun(pid, read)
        os.close(read)
    return subprocess.Popen(
        command, cwd=folder.path, env=env, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=sandbox.preexec(identity, limits, _isolate_network(), scratch_keep=scratch),
    )


def _last_words(tail: deque[bytes], otherwise: str) -> str:
    lines = b"".join(tail).decode(errors="replace").strip().splitlines()
    kept, dumping = [], False
    for line in lines:  # each fault handler's dump, to its list of modules, is not what the script last said
        if line.startswith("Fatal Python error: "):
            dumping = True
        elif dumping and line.startswith("Extension modules:"):
            dumping = False
        elif not dumping:
            kept.append(line)
    lines = kept
    return f"its last line: {lines[-1][:300]}" if lines else otherwise


_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')


def _crash_where(tail: deque[bytes], copy: Path, display: str) -> str:
    """' at train.py:61': the deepest line of the script on the crashed thread's stack, as the run's fault handler
    (checker.candidate.launch) printed it, innermost frame first; '' where it printed none."""
    lines = b"".join(tail).decode(errors="replace").splitlines()
    start = max((i for i, line in enumerate(lines) if line.startswith("Current thread")), default=None)
    if start is None:
        return ""
    for line in lines[start + 1:]:
        frame = _FRAME.match(line)
        if frame is None:
            break
        if os.path.realpath(frame["file"]) == os.path.realpath(copy):
            return f" at {display}:{frame['line']}"
    return ""


def _where(where: str | None, copy: Path, display: str) -> str:
    """' at train.py:12' with the run's copy of the script named as the learner knows it."""
    if not where:
        return ""
    return " at " + where.replace(str(copy), display)


_NETWORK: bool | None = None


_SCRATCH: bool | None = None


def _private_scratch() -> bool:
    """Whether runs get their own /dev/shm, /tmp, /var/tmp and /run/lock here (checker.grader.sandbox)."""
    global _SCRATCH
    if _SCRATCH is None or os.environ.get("WORKBOOK_PRIVATE_SCRATCH") == "0":
        _SCRATCH = sandbox.scratch_isolation_available()
    return _SCRATCH


def share_network() -> bool:
    """For a job leader: put this process in a network namespace of its own where runs are isolated, and start its
    runs there rather than each in its own (the ranks of a job reach each other over its loopback). Whether it made
    one."""
    global _NETWORK
    made = _isolate_network() and sandbox.enter_job_network()
    _NETWORK = False
    return made


def _isolate_network() -> bool:
    global _NETWORK
    if _NETWORK is None:
        _NETWORK = sandbox.network_isolation_available() and os.environ.get("WORKBOOK_NETWORK") != "1"
    return _NETWORK
