"""Run one job of several ranks (a data-parallel chapter): every rank a run of its own, started together.

Each rank is an ordinary run (``checker.grader.runs.run_script``: its own private folder, its own user, its own
channel, stamped on the grader's clock), with torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``MASTER_ADDR``, ``MASTER_PORT``) added. The ranks find each other over loopback TCP, so the job gets one network
namespace of its own, shared by its ranks and nothing else:

* a job leader, forked from the grader, enters a new network namespace (where the kernel allows it; else the
  ranks share the machine's network, as a single run does when it cannot be isolated), brings its loopback up and
  picks a free port there;
* the leader forks one grader process per rank, which runs that rank with ``run_script`` and hands back its
  ``RunResult``; a rank that fails ends the job: the others are given a few seconds, then killed.

The job's result is rank 0's run, with every rank's in ``ranks``: the window runs from the first rank's window
opening to the last rank's weights arriving; its samples are the distinct samples the ranks read in the window
(what ``checker.base.ranks.LoggedSamples`` recorded, each rank's claim; the referee's judgement of the weights is
what the work rests on); and ``rank_weight_gap`` says how far the ranks' trained weights are apart.
"""

from __future__ import annotations

import io
import os
import pickle
import select
import signal
import socket
import time
import traceback
from pathlib import Path

from checker.base.errors import WorkbookError
from checker.grader import runs, sandbox

# NVLink multicast (NVLS) switched off for NCCL and torch's symmetric memory: on the lent H100/H200 machines it
# hung or failed to start (notes/distributed-doctor-isolation.md)
GPU_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
FAILURE_GRACE_S = 5.0  # after one rank failed, how long the others may take to stop by themselves


def world_size(cfg: dict) -> int:
    """How many ranks a chapter's job runs on this device (1: an ordinary run)."""
    return max(int(cfg.get("world_size", 1)), 1)


def run_job(chapter, script: Path, device: str, *, world: int, display: str | None = None, **kwargs) -> runs.RunResult:
    """Run ``script`` as a job of ``world`` ranks; the arguments are ``run_script``'s. Raises the first rank's
    failure (a ScriptError or IncompleteWork) when any rank fails."""
    if device == "cuda":
        import torch

        if torch.cuda.device_count() < world:
            raise WorkbookError(f"{chapter.id} runs on {world} GPUs and this machine has {torch.cuda.device_count()}: "
                                "grade it on a machine with enough GPUs, or on the CPU (--device cpu)")
    display = display or str(script)
    # One compile-cache claim has one place; ranks filling and emptying it at once would remove each other's files
    # (FileExistsError in the second rank's fill). A job's ranks compile cold.
    kwargs.pop("compile_cache", None)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the job leader, measured through its result
        os.close(read)
        code = 0
        try:
            outcome = _lead(chapter, script, device, world, display, kwargs)
        except BaseException as exc:  # noqa: BLE001 - everything goes back to the grader
            outcome = ("error", _portable(exc))
            code = 1
        try:
            with os.fdopen(write, "wb") as handle:
                pickle.dump(outcome, handle)
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as handle:
        data = handle.read()
    os.waitpid(pid, 0)
    if not data:
        raise runs.ScriptError(f"{display}: the job's leader ended without a result")
    kind, value = pickle.loads(data)
    if kind == "error":
        raise value
    return _combine(value, display)


def _portable(exc: BaseException) -> BaseException:
    """The exception itself when it pickles, else a WorkbookError carrying its text."""
    try:
        pickle.dumps(exc)
        return exc
    except Exception:  # noqa: BLE001
        return WorkbookError(f"{type(exc).__name__}: {exc}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as handle:
        handle.bind(("127.0.0.1", 0))
        return int(handle.getsockname()[1])


def _lead(chapter, script: Path, device: str, world: int, display: str, kwargs: dict):  # pragma: no cover - forked
    """In the job leader: the job's network namespace, one grader process per rank, their results."""
    runs.share_network()  # the ranks stay in this namespace: they must reach each other's loopback
    sandbox.become_subreaper(forked=True)
    port = _free_port()
    children: dict[int, tuple[int, int]] = {}  # pid -> (rank, read end)
    for rank in range(world):
        env = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world), "LOCAL_WORLD_SIZE": str(world),
               "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1"}
        if device == "cuda":
            env.update(GPU_ENV)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            sandbox.become_subreaper(forked=True)  # each rank's grader process reaps its own run's descendants
            code = 0
            try:
                result = ("ok", runs.run_script(chapter, script, device, display=f"{display} (rank {rank})",
                                                extra_env=env, **kwargs))
            except BaseException as exc:  # noqa: BLE001
                result, code = ("error", _portable(exc)), 1
                if not isinstance(exc, (WorkbookError, runs.IncompleteWork)):
                    traceback.print_exc()
            try:
                with os.fdopen(write, "wb") as handle:
                    pickle.dump(result, handle)
            finally:
                os._exit(code)
        os.close(write)
        children[pid] = (rank, read)
    results: dict[int, object] = {}
    buffers = {read: io.BytesIO() for _, read in children.values()}
    rank_of = {read: rank for rank, read in children.values()}
    failed_at: float | None = None
    open_fds = set(buffers)
    while open_fds:
        timeout = None if failed_at is None else max(0.0, failed_at + FAILURE_GRACE_S - time.monotonic())
        ready, _, _ = select.select(list(open_fds), [], [], timeout)
        if not ready:  # a rank failed and the others did not stop: end them
            for pid, (rank, read) in children.items():
                if read in open_fds:
                    _kill(pid)
            break
        for fd in ready:
            chunk = os.read(fd, 1 << 20)
            if chunk:
                buffers[fd].write(chunk)
                continue
            open_fds.discard(fd)
            os.close(fd)
            data = buffers[fd].getvalue()
            outcome = pickle.loads(data) if data else ("error", runs.ScriptError(
                f"{display} (rank {rank_of[fd]}): its grader process ended without a result"))
            results[rank_of[fd]] = outcome
            if outcome[0] == "error" and failed_at is None:
                failed_at = time.monotonic()
    for pid in children:
        os.waitpid(pid, 0)
    sandbox.kill_survivors(os.getpid(), None, set(), grace_s=0)
    errors = [(rank, value) for rank, (kind, value) in sorted(results.items()) if kind == "error"]
    if errors or len(results) < world:
        first = _first_cause(errors)
        if first is None:
            first = runs.ScriptError(f"{display}: {world - len(results)} rank(s) gave no result; the grader stopped the job")
        return ("error", first)
    return ("ok", [results[rank][1] for rank in range(world)])


def _first_cause(errors):
    """The failure to report: one that is not a rank's collective timing out because another rank had failed."""
    if not errors:
        return None
    for _rank, error in errors:
        text = str(error)
        if "Connection closed by peer" not in text and "Connection reset" not in text and "timed out" not in text:
            return error
    return errors[0][1]


def _kill(pid: int) -> None:  # pragma: no cover - forked
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _combine(ranks: list[runs.RunResult], display: str) -> runs.RunResult:
    """Rank 0's result, carrying the job: every rank, the job's window and its distinct samples."""
    import numpy as np

    first = ranks[0]
    opened = min(r.marks_ns["open"] for r in ranks)
    arrived = max(r.marks_ns["weights"] for r in ranks)
    window_s = (arrived - opened) / 1e9
    if all(r.sample_ids is not None for r in ranks):
        ids = np.concatenate([np.frombuffer(r.sample_ids, dtype=np.int64) for r in ranks])
        samples = int(len(np.unique(ids)))
    else:
        samples = sum(r.samples for r in ranks)
    from dataclasses import replace

    return replace(first, samples=samples, window_s=window_s,
                   samples_per_s=samples / window_s if window_s > 0 else None,
                   raw=dict(first.raw, samples=samples, ranks=len(ranks)),
                   ranks=list(ranks), rank_weight_gap=weight_gap([r.weights for r in ranks]))


def weight_gap(weights: list[bytes | None]) -> float | None:
    """The largest difference between any rank's trained weights and rank 0's, relative to the tensor's largest
    value (0.0: identical). None when a rank sent none or a rank's state does not load as tensors."""
    if any(w is None for w in weights):
        return None
    if all(w == weights[0] for w in weights[1:]):
        return 0.0
    import torch

    try:
        states = [torch.load(io.BytesIO(w), map_location="cpu", weights_only=True) for w in weights]
    except Exception:  # noqa: BLE001 - bytes that are not a state are the referee's to report
        return None
    gap = 0.0
    for state in states[1:]:
        if set(state) != set(states[0]):
            return float("inf")
        for key, value in states[0].items():
            other = state[key]
            if other.shape != value.shape:
                return float("inf")
            if value.is_floating_point():
                scale = float(value.abs().max()) or 1.0
                gap = max(gap, float((other.float() - value.float()).abs().max()) / scale)
            elif not torch.equal(other, value):
                return float("inf")
    return gap
