"""Run one chapter script inside this process, the way the grader runs it or the way a recipe traces it.

Under the grader (``checker.grader.runs``), with ``--channel DIR``::

    python -I -B -c <bootstrap> --channel DIR --script train.py [--trace torch --trace-out F] -- --steps N ...

the run's seed and window key come over the channel, and what the script did goes back over it: an error,
an early exit from the step loop, the trained weights (sent by the session itself), the loader's settings.

On its own, as the chapters' torch.profiler recipes use it::

    python -m checker.launch --script labs/01_item_syncs/train.py --result out.json --trace torch --trace-out t.json.gz

it writes what the session measured to ``--result`` for the learner to read.
"""

from __future__ import annotations

import argparse
import atexit
import faulthandler
import json
import os
import runpy
import sys
import traceback
from pathlib import Path

from checker.base.ranks import world_from_env
from checker.candidate import session as harness
from checker.candidate.channel import Channel, deliver


def _where(exc: BaseException, script: Path) -> str | None:
    """file:line of the deepest frame inside the script, else the deepest frame of all."""
    if isinstance(exc, SyntaxError) and exc.filename and exc.lineno:
        return f"{exc.filename}:{exc.lineno}:{exc.offset or 0}"
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if Path(f.filename).resolve() == script.resolve()]
    frame = (inside or [f for f in frames if not f.filename.startswith("<frozen")] or [None])[-1]
    return f"{frame.filename}:{frame.lineno}" if frame else None


def _outcome(script: Path, error: dict | None) -> dict:
    """What the script did, as the grader needs to hear it: an error, a step loop left early, or done."""
    session = harness.current()
    if error is not None:
        return {"type": "error", **error}
    if session is None:
        return {"type": "error", "error": "the script never called checker.lab.start(...)"}
    if not session._window_closed:
        return {"type": "incomplete", "steps_done": session.steps_done, "steps_expected": session.total_steps,
                "error": f"the script left session.steps() after {session.steps_done} of "
                         f"{session.total_steps} steps"}
    result = session._window_measured()
    return {"type": "done", "samples": result["samples"], "loader": result["loader"],
            "trace_file": result["trace_file"], "device_name": result["device_name"]}


def _per_rank(path: Path | None, rank: int) -> Path | None:
    """out.json.gz -> out.rank1.json.gz: each rank of a job started by torchrun writes a file of its own."""
    if path is None:
        return None
    suffix = "".join(path.suffixes[-2:]) if path.name.endswith(".gz") else path.suffix
    return path.with_name(f"{path.name[:len(path.name) - len(suffix)]}.rank{rank}{suffix}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checker.launch")
    parser.add_argument("--script", required=True, type=Path, help="the chapter script to run")
    parser.add_argument("--result", type=Path, default=None, help="write what the session measured here (JSON)")
    parser.add_argument("--trace", choices=("torch", "none"), default="none",
                        help="torch: record the timed window with torch.profiler")
    parser.add_argument("--trace-out", type=Path, default=None, help="where to write the torch.profiler trace")
    parser.add_argument("--trace-tail", type=int, default=0, metavar="N",
                        help="with --trace torch: the last N of the script's --steps are traced, after the timed "
                             "window, instead of the window")
    parser.add_argument("--channel", type=Path, default=None, help=argparse.SUPPRESS)  # the grader's
    # the grader's scan of the script, to run over every other file the run loads code from (comma-separated flags)
    parser.add_argument("--scan-loaded", default=None, help=argparse.SUPPRESS)
    args, script_args = parser.parse_known_args(argv)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]

    faulthandler.enable()  # a crash in native code prints each thread's Python stack, for the grader to point at
    channel = Channel(args.channel) if args.channel else None
    rank, world, _local = world_from_env()
    if world > 1 and channel is None:  # torchrun's ranks on their own: one trace and one result file per rank
        args.trace_out = _per_rank(args.trace_out, rank)
        args.result = _per_rank(args.result, rank)
    options = harness.LaunchOptions(trace=None if args.trace == "none" else args.trace, trace_out=args.trace_out,
                                    trace_tail=max(args.trace_tail, 0), channel=channel)
    if channel is not None:
        handshake = channel.receive()
        options.seed = int(handshake["seed"])
        options.args = list(script_args)  # the grader's own settings for the run (checker.grader.runs: script_args)
    script = args.script.resolve()
    options.script = os.path.realpath(script)
    if args.scan_loaded is not None:
        options.scan_loaded = tuple(flag for flag in args.scan_loaded.split(",") if flag)
    options.kernels_folder = harness.kernels_folder_now()
    harness.LAUNCH = options
    sys.argv = [str(script), *script_args]
    error = None
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:  # a script may call sys.exit(0) at its end
        if exc.code not in (None, 0):
            error = {"error": f"the script exited with {exc.code!r}", "where": _where(exc, script)}
    except BaseException as exc:  # noqa: BLE001 - everything the script raises is reported, not re-raised
        error = {"error": f"{type(exc).__name__}: {exc}", "where": _where(exc, script)}
        traceback.print_exc()

    if channel is not None:
        # what the script left for its exit (atexit, weakref.finalize's, multiprocessing's ending of its children) runs
        # now, before the outcome: the grader reads the run's CPU from the window's end to the outcome, and a step's
        # work kept for the exit is still the step's (checker.checks.same_work: work after the window)
        atexit._run_exitfuncs()
    outcome = _outcome(script, error)
    if channel is not None:
        deliver(channel, outcome)
    if args.result is not None:
        session = harness.current()
        result = dict(session._window_measured() if session else {}, outcome=outcome["type"])
        if "error" in outcome:
            result["error"] = outcome["error"]
        args.result.parent.mkdir(parents=True, exist_ok=True)
        args.result.write_text(json.dumps(result))
    code = 0 if outcome["type"] == "done" else 3
    if channel is not None and not os.environ.get("CUDA_INJECTION64_PATH"):
        # under the grader, nothing of the script's runs after its outcome: no finalizer of the interpreter's
        # teardown (a __del__ of a global). Under nsys or ncu (their injection library) the process ends normally,
        # so that they write their report.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
