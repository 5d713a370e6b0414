"""`workbook doctor`'s launcher: runs the user's training script unmodified, in this process, and records its steps.

    python -m checker.doctor.launch --out DIR --warmup 3 --steps 5 --device cpu --tool torch -- train.py ARGS...
    python -m checker.doctor.launch --out DIR ... -- -m package.module ARGS...

This module runs inside the user's process, beside their code: it imports nothing of the workbook (only the
standard library and torch), and it changes nothing the job computes. It only listens:

* a step ends at each ``Optimizer.step()`` (torch's process-wide step hooks). With several optimizers (a GAN's
  two, a critic stepped five times per generator step), a step ends at each step of the optimizer that steps
  least often (on a tie, the one that first stepped last): one pass through every optimizer. A script that
  updates its weights by hand (``p.data.add_(p.grad, alpha=-lr)``) steps no optimizer: with ``--step-at
  backward`` a step ends at each ``torch.autograd.backward`` (``loss.backward()``) instead; without it, a job that
  makes ``BACKWARD_LIMIT`` backward passes and no optimizer step is stopped there, and the record says so;
* every fetch from a DataLoader (``_BaseDataLoaderIter.__next__``) is a ``data`` range, and the loader's settings
  and the line that built it are written down;
* after ``--warmup`` steps, torch.profiler (``--tool torch``: CPU, and CUDA on a GPU, with Python frames) or
  ``cudaProfilerStart`` (``--tool nsys``) records ``--steps`` steps, each one range ``doctor step N`` (and an
  NVTX range of that name on a GPU); then the trace is written, the job is stopped with its own message
  (``os._exit``: no more of the user's code runs, so it writes nothing more), and ``DIR/record.json`` says what
  was seen. A script that ends, exits or crashes first leaves a record saying so.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import runpy
import sys
import sysconfig
import time
import traceback
from pathlib import Path

STEP_RANGE = "doctor step {}"       # the step pattern the analysis reads: ^doctor step (\d+)$
DATA_RANGE = "data"                 # the trace engine's data-wait range
STOPPED = "stopped"                 # the record's status once the asked steps are recorded
LIBRARY_DIRS = tuple({sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")})
CHECKER_DIR = str(Path(__file__).resolve().parents[1])
NO_OPTIMIZER = "no optimizer"      # the record's status for a job stopped at BACKWARD_LIMIT with no optimizer step
BACKWARD_LIMIT = 256               # backward passes with no optimizer step: no accumulation is that long


def user_site(skip: int = 1) -> str | None:
    """The innermost frame of the caller's stack in a file of the user's (not the standard library, an installed
    package or the workbook's checker), as 'path:line' relative to the working folder."""
    frame = sys._getframe(skip)
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith("<") or name.startswith(LIBRARY_DIRS) or name.startswith(CHECKER_DIR)
                or "site-packages" in name or "dist-packages" in name):
            try:
                shown = os.path.relpath(name)
            except ValueError:
                shown = name
            return f"{shown if not shown.startswith('..') else name}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class Recorder:
    """The listening half: optimizer steps, DataLoader fetches, the profiler's window."""

    def __init__(self, out: Path, warmup: int, steps: int, device: str, tool: str, step_at: str = "optimizer"):
        import torch

        self.torch = torch
        self.out, self.warmup, self.steps, self.device, self.tool = out, warmup, steps, device, tool
        self.nvtx = device == "cuda" and torch.cuda.is_available()
        self.started_at = time.time()
        self.optimizers: dict[int, dict] = {}   # id -> class, where step() was called, steps
        self.sequence: list[int] = []            # optimizer ids in the order they stepped (warm-up only)
        self.anchor: int | str | None = None     # what ends a step, fixed after warm-up: an optimizer's id, "backward"
        self.done_steps = 0                      # training steps finished (anchor steps)
        self.window_step = -1                    # the recorded step in progress (-1: not recording)
        self.fetches_total = 0
        self.fetches_per_step: list[int] = []
        self._fetches_now = 0
        self.loaders: list[dict] = []
        self._loader_sites: dict[int, str | None] = {}
        self._range = None
        self.profiler = None
        self.compiled_graphs_at_start: int | None = None
        self.status = "running"
        self.step_at = step_at
        self.backwards = 0                       # backward passes (torch.autograd.backward calls) so far
        self.backward_where: str | None = None   # the line of the user's that made the last one

    # ---- hooks --------------------------------------------------------------------------------
    def install(self) -> None:
        torch = self.torch
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        register_optimizer_step_pre_hook(self._pre_step)
        register_optimizer_step_post_hook(self._post_step)
        recorder, backward = self, torch.autograd.backward

        def counted_backward(*args, **kwargs):  # Tensor.backward() calls torch.autograd.backward: one pass each
            result = backward(*args, **kwargs)
            recorder._after_backward()
            return result

        counted_backward.__wrapped__ = backward
        torch.autograd.backward = counted_backward
        try:  # private API (pinned: torch 2.14): without it, no data ranges, said in the record
            from torch.utils.data import DataLoader
            from torch.utils.data.dataloader import _BaseDataLoaderIter
        except ImportError:
            self.no_loader_hook = "torch.utils.data.dataloader._BaseDataLoaderIter is missing in this torch"
            return
        self.no_loader_hook = None
        loader_init, iter_init, iter_next = DataLoader.__init__, _BaseDataLoaderIter.__init__, \
            _BaseDataLoaderIter.__next__

        def init(loader, *args, **kwargs):
            recorder._loader_sites.setdefault(id(loader), user_site(2))
            return loader_init(loader, *args, **kwargs)

        def start_iter(it, loader, *args, **kwargs):
            recorder.saw_loader(loader)
            return iter_init(it, loader, *args, **kwargs)

        def fetch(it):
            recorder._fetches_now += 1
            recorder.fetches_total += 1
            if recorder.window_step < 0:
                return iter_next(it)
            with torch.profiler.record_function(DATA_RANGE):
                if recorder.nvtx:
                    torch.cuda.nvtx.range_push(DATA_RANGE)
                try:
                    return iter_next(it)
                finally:
                    if recorder.nvtx:
                        torch.cuda.nvtx.range_pop()

        DataLoader.__init__ = init
        _BaseDataLoaderIter.__init__ = start_iter
        _BaseDataLoaderIter.__next__ = fetch

    def saw_loader(self, loader) -> None:
        key = id(loader)
        if any(entry["id"] == key for entry in self.loaders):
            return
        settings = {"id": key, "class": type(loader).__name__, "where": self._loader_sites.get(key),
                    "dataset": type(getattr(loader, "dataset", None)).__name__}
        for name in ("batch_size", "num_workers", "pin_memory", "persistent_workers", "prefetch_factor"):
            value = getattr(loader, name, None)
            settings[name] = value if isinstance(value, (bool, int, float, str, type(None))) else repr(value)
        self.loaders.append(settings)

    def _pre_step(self, optimizer, args, kwargs) -> None:
        key = id(optimizer)
        if key not in self.optimizers:
            groups = getattr(optimizer, "param_groups", [])
            defaults = getattr(optimizer, "defaults", {}) or {}
            self.optimizers[key] = {
                "class": type(optimizer).__name__, "where": user_site(3), "steps": 0,
                "params": sum(len(g.get("params", ())) for g in groups),
                "foreach": defaults.get("foreach"), "fused": defaults.get("fused"),
                "first_seen": len(self.sequence)}

    def _post_step(self, optimizer, args, kwargs) -> None:
        key = id(optimizer)
        if key not in self.optimizers:  # an optimizer whose pre-hook did not run (a subclass calling hooks itself)
            self._pre_step(optimizer, args, kwargs)
        self.optimizers[key]["steps"] += 1
        if self.step_at == "backward":
            return
        if self.anchor is None:
            self.sequence.append(key)
            if key != self._anchor_so_far():
                return
        elif key != self.anchor:
            return
        # after warm-up, this optimizer's steps end the steps from here on
        self._end_of_a_step(self.optimizers[key]["steps"], key)

    def _after_backward(self) -> None:
        self.backwards += 1
        self.backward_where = user_site(3)
        if self.step_at == "backward":
            self._end_of_a_step(self.backwards, "backward")
        elif not self.optimizers and self.backwards >= BACKWARD_LIMIT:
            self.status = NO_OPTIMIZER
            self.write()
            stop_now(0)

    def _end_of_a_step(self, done: int, anchor) -> None:
        """A step of the anchor's ended, ``done`` of them so far: open the window after warm-up, else end a step."""
        if self.anchor is None:
            if done < self.warmup:
                return
            self.anchor = anchor
            self.done_steps = done
            self._open_window()
            return
        self.done_steps += 1
        self._end_step()

    def _anchor_so_far(self) -> int:
        """The optimizer that steps least often so far; on a tie, the one that first stepped last."""
        counts = {k: v["steps"] for k, v in self.optimizers.items()}
        return min(counts, key=lambda k: (counts[k], -self.optimizers[k]["first_seen"]))

    # ---- the window ---------------------------------------------------------------------------
    def _compiled_graphs(self) -> int | None:
        dynamo = sys.modules.get("torch._dynamo.utils")
        if dynamo is None:
            return None
        try:
            return int(dynamo.counters["stats"]["unique_graphs"])
        except Exception:  # noqa: BLE001 - a counter that moved in another torch: not known
            return None

    def _open_window(self) -> None:
        torch = self.torch
        self.compiled_graphs_at_start = self._compiled_graphs()
        if self.device == "cuda" and torch.cuda.is_available():
            torch.cuda.synchronize()  # the window starts with an empty queue: no warm-up work spills into it
        if self.tool == "torch":
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device == "cuda" and torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            options = {}
            if hasattr(torch._C._profiler, "_ExperimentalConfig"):  # the autograd engine's thread too
                options["experimental_config"] = torch._C._profiler._ExperimentalConfig(profile_all_threads=True)
            self.profiler = torch.profiler.profile(activities=activities, with_stack=True, record_shapes=False,
                                                   **options)
            self.profiler.__enter__()
        elif self.device == "cuda" and torch.cuda.is_available():
            torch.cuda.profiler.start()
        self.window_step = self.done_steps
        self._fetches_now = 0
        self._begin_range()

    def _begin_range(self) -> None:
        name = STEP_RANGE.format(self.window_step)
        self._range = self.torch.profiler.record_function(name)
        self._range.__enter__()
        if self.nvtx:
            self.torch.cuda.nvtx.range_push(name)

    def _end_step(self) -> None:
        if self.window_step < 0:
            return
        if self.nvtx:
            self.torch.cuda.nvtx.range_pop()
        self._range.__exit__(None, None, None)
        self.fetches_per_step.append(self._fetches_now)
        self._fetches_now = 0
        if len(self.fetches_per_step) < self.steps:
            self.window_step = self.done_steps
            self._begin_range()
            return
        self._finish()

    def _finish(self) -> None:
        torch = self.torch
        if self.device == "cuda" and torch.cuda.is_available():
            torch.cuda.synchronize()
        graphs = self._compiled_graphs()
        self.compiled_in_window = (graphs is not None and self.compiled_graphs_at_start is not None
                                   and graphs > self.compiled_graphs_at_start)
        if self.profiler is not None:
            self.profiler.__exit__(None, None, None)
            self.profiler.export_chrome_trace(str(self.out / "trace.json"))
        elif self.device == "cuda" and torch.cuda.is_available():
            torch.cuda.profiler.stop()
        self.status = STOPPED
        self.write()
        print(f"workbook doctor: recorded {self.steps} training steps after {self.warmup} warm-up steps; the job "
              "was stopped here, on purpose", file=sys.stderr, flush=True)
        stop_now(0)

    # ---- the record ---------------------------------------------------------------------------
    def write(self, **extra) -> None:
        if self.anchor is not None:
            steps_done = self.done_steps
        elif self.step_at == "backward":
            steps_done = self.backwards
        else:
            steps_done = max((v["steps"] for v in self.optimizers.values()), default=0)
        if self.anchor == "backward":
            anchor, anchor_where = "backward()", self.backward_where
        elif self.anchor is not None:
            anchor, anchor_where = self.optimizers[self.anchor]["class"], self.optimizers[self.anchor]["where"]
        else:
            anchor = anchor_where = None
        record = {
            "status": self.status, "warmup": self.warmup, "steps_asked": self.steps, "device": self.device,
            "tool": self.tool, "step_at": self.step_at, "backwards": self.backwards,
            "backward_where": self.backward_where, "steps_done": steps_done,
            "recorded_steps": len(self.fetches_per_step), "step_pattern": r"^doctor step (\d+)$",
            "optimizers": list(self.optimizers.values()), "anchor": anchor, "anchor_where": anchor_where,
            "fetches_total": self.fetches_total, "fetches_per_step": self.fetches_per_step,
            "loaders": self.loaders, "loader_hook_missing": getattr(self, "no_loader_hook", None),
            "compiled": "torch._dynamo" in sys.modules and bool(self._compiled_graphs()),
            "compiled_in_window": bool(getattr(self, "compiled_in_window", False)),
            "torch": self.torch.__version__, "seconds": round(time.time() - self.started_at, 3),
            "script_dir": getattr(self, "script_dir", None),
            "trace": "trace.json" if (self.out / "trace.json").exists() else None,
            **extra}
        (self.out / "record.json").write_text(json.dumps(record, indent=1, default=str))


def stop_now(code: int) -> None:
    """End the user's job here: flush what it printed, end its DataLoader worker processes, exit."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream: nothing to flush
            pass
    for child in multiprocessing.active_children():
        child.terminate()
    for child in multiprocessing.active_children():
        child.join(timeout=2)
    os._exit(code)


def _one_line(message: str, width: int = 300) -> str:
    """An exception's message as one line of plain text: its first line, terminal colours left out, cut at width."""
    lines = [line.strip() for line in re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", message).splitlines() if line.strip()]
    first = lines[0] if lines else message.strip()
    more = len(lines) > 1 or len(first) > width
    return first[:width].rstrip() + (" ..." if more else "")


def _crash_site(exc: BaseException) -> str | None:
    """The innermost frame of the user's in a traceback, as 'path:line'."""
    found = None
    for frame in traceback.extract_tb(exc.__traceback__):
        name = frame.filename
        if not (name.startswith("<") or name.startswith(LIBRARY_DIRS) or name.startswith(CHECKER_DIR)
                or "site-packages" in name):
            shown = os.path.relpath(name)
            found = f"{name if shown.startswith('..') else shown}:{frame.lineno}"
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m checker.doctor.launch")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--tool", choices=("torch", "nsys"), default="torch")
    parser.add_argument("--step-at", choices=("optimizer", "backward"), default="optimizer")
    parser.add_argument("target", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    target = args.target[1:] if args.target[:1] == ["--"] else args.target
    if not target:
        parser.error("give the script to run: -- train.py ARGS, or -- -m module ARGS")
    if int(os.environ.get("WORLD_SIZE", "1") or 1) > 1:  # a rank of a torchrun job: a folder of its own
        args.out = args.out / f"rank{int(os.environ.get('RANK', '0') or 0)}"
        args.out.mkdir(parents=True, exist_ok=True)
    recorder = Recorder(args.out, max(args.warmup, 0), max(args.steps, 1), args.device, args.tool, args.step_at)
    recorder.install()
    module = target[1] if target[0] == "-m" and len(target) > 1 else None
    argv0 = target[1:] if module else target
    try:
        if module:
            sys.argv = [module, *argv0[1:]]  # runpy sets argv[0] to the module's file
            sys.path[0] = os.getcwd()
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            script = Path(argv0[0])
            sys.argv = [str(script), *argv0[1:]]
            sys.path[0] = str(script.resolve().parent)
            recorder.script_dir = sys.path[0]
            runpy.run_path(str(script), run_name="__main__")
        recorder.status = "ended"
        recorder.write()
        return stop_now(0)
    except SystemExit as exc:
        code = exc.code
        recorder.status = "exited"
        recorder.write(exit_code=code if isinstance(code, int) or code is None else 1, exit_message=
                       None if isinstance(code, int) or code is None else str(code)[:300])
        return stop_now(0)
    except KeyboardInterrupt:
        recorder.status = "interrupted"
        recorder.write()
        return stop_now(130)
    except BaseException as exc:  # noqa: BLE001 - the user's crash, whatever it is, is reported, not re-raised
        recorder.status = "crashed"
        (args.out / "traceback.txt").write_text("".join(traceback.format_exception(exc)))
        recorder.write(error=_one_line(traceback.format_exception_only(exc)[-1]), error_where=_crash_site(exc))
        return stop_now(0)


if __name__ == "__main__":
    raise SystemExit(main())
