"""What the grader believes of a run beyond its own clock: its weights (through the referee) and its trace
(when it lines up with the steps the grader stamped)."""

from __future__ import annotations

import functools
import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from checker.base.chapters import Chapter
from checker.base.errors import WorkbookError
from checker.grader.runs import RunResult
from checker.grader import forkserver
from checker.trace.analyses.collectives import COLLECTIVE_RUN
from checker.trace.analyses.counts import NOT_A_PASS, aten_base_name, top_level_aten_ops
from checker.trace.analyses.stack import FRAME
from checker.trace.intervals import merge

REFEREE_TIMEOUT_S = 600
# On a CPU, where no clock of the grader's backs a count: the least share of a traced step's time (the median
# over the traced steps) that recorded PyTorch ops must cover. docs/results/cpu-trace-coverage.md and -09.md: every
# chapter's lab and solution 55% to 96%; the eager step run with recording switched off, in a forked process or in
# numpy, 3% at most. A step of a tiny model is mostly Python between its ops (the grading tests' stand-in chapter
# covers 24%), so the floor stays low: work moved out of a step partly (chapter 09's ranks evaluating a quarter of
# the held-out set in numpy, 26% to 47%) is judged against the slow script's unseen time instead (rank_work)
OP_COVERAGE_FLOOR = 0.15
# On a CPU, in a chapter without loader workers: the most CPU time other processes under a traced run may use in
# its window, as a share of the training process's and at least (evidence/history/2026-11-27-cpu-session42-other-
# processes.md): chapters 04's and 06's solutions 0.0 ms (no process under them); a spawned helper that read three
# values per step for the training process 4.2 ms (7.6%), one that ran the whole step 22.0 ms (50%).
OTHER_PROCESS_SHARE = 0.005
OTHER_PROCESS_FLOOR_NS = 1_000_000
# Python calls that are training, not PyTorch's own machinery: a model's forward, an optimizer, the chapter's
# workload. Inside an aten op they mean the op was replaced to run the step (autograd's anomaly mode and
# activation checkpointing run their own Python inside ops: traceback.py, torch/utils/checkpoint.py).
TRAINING_CODE = r"(torch/nn/modules/|torch/optim/|chapters/)"
# What an aten op never runs inside itself: autograd's engine (a backward pass) and an optimizer's step, each
# recorded under its own name wherever it runs, and operators called back from Python. A hook that runs inside an
# op's dispatch (autograd's saved-tensor hooks run while the op saves its inputs, in the op's autograd kernel; a
# dispatch mode's __torch_dispatch__ runs for every op under it) nests a whole backward or any forward work under one
# top-level op, out of the top-level counts' sight. What such Python may run inside an op: the op again, or an op the
# op itself runs outside any Python (activation checkpointing's dispatch mode re-runs each op it is handed), and ops
# that do no work (views, detach, allocations): NO_WORK. Anything else was a step's work hidden there.
NESTED_TRAINING = re.compile(r"^(?:autograd::engine::evaluate_function: |Optimizer\.(?:step|zero_grad)#)")
PRODUCTS = frozenset("mm addmm bmm baddbmm addbmm matmul linear mv addmv dot vdot outer ger addr einsum "
                     "tensordot".split())
NO_WORK = NOT_A_PASS - PRODUCTS
# Python's calls of PyTorch operators, as its tracer names them, and the operators whose call always runs an aten op
# of the same name (elementwise and normalization ops, products): one of them holding no recorded op ran with op
# recording switched off. A few are allowed (a call too short for the clocks to order).
# (a method of torch's functions' type or of a Tensor, or one of torch.nn.functional's C functions, whose names,
# unlike math's `log` or `exp`, are torch's alone)
OPERATOR_CALL = (r"^<built-in method (\w+) of (?:type|Tensor) object at 0x[0-9a-fA-F]+>$"
                 r"|^<built-in function (gelu|silu|linear|mse_loss|cross_entropy_loss|nll_loss|softplus|leaky_relu)>$")
# Besides the math, the operators a loss helper or a loop reads values and makes shapes with (reads, masks, counts,
# creation, views, copies): each was seen to hold its aten op in a CPU trace recorded as the workbook records one
# (torch 2.14), `tolist` its resolve_conj, `numpy` its detach. Not in the list: what answers from the tensor's
# metadata without dispatching (`size`, `dim`, `numel`, and `contiguous` of a contiguous tensor).
RECORDED_OPERATORS = frozenset(
    "add sub mul div neg reciprocal sigmoid tanh relu gelu silu rsqrt sqrt exp log pow where clamp lerp addcmul "
    "addcdiv layer_norm softmax log_softmax mse_loss cross_entropy_loss nll_loss mm addmm bmm matmul linear mv "
    "erf var_mean softplus leaky_relu "
    "item tolist numpy nonzero any all _unique2 repeat_interleave masked_select masked_fill index_select index_put_ "
    "gather scatter_add_ bincount count_nonzero cumsum sum mean max min argmax abs eq ne gt lt ge le "
    "zeros ones full empty arange tensor zeros_like ones_like new_zeros new_ones new_full cat stack "
    "narrow flatten reshape view expand squeeze unsqueeze clone detach copy_ to float long bool".split()
)
UNRECORDED_ALLOWED = 2
# the dispatcher's entries from Python that run an operator below the profiler's hook: a redispatch runs no
# RecordFunction, so the op it runs is never recorded (``OpOverload.redispatch`` calls it)
BELOW_THE_HOOK = re.compile(r"^(?:<built-in method redispatch_boxed of |torch/_ops\.py\(\d+\): redispatch$)")
# PyTorch's switches of what the profiler records, called in a step: op recording off and on again
# (``torch.autograd._enable_record_function``), or the collection paused (``_toggle_collection_dynamic``). The
# harness calls neither; a script that does hides the ops between the two calls, whatever they are
PROFILER_SWITCH = re.compile(r"^<built-in method (?:_enable_record_function|_toggle_collection_dynamic|"
                             r"_set_record_function_enabled) of ")


# What runs outside the steps' ranges, from the trace's start to its first step and from its last step to the trace's
# end, is the harness's. After the last step: its copies of the model's tensors to the host
# (checker.candidate.session.state_bytes, the update probe's flat copies; a weight in another memory format, chapter
# 07's channels-last convolutions on a GPU, is cloned when the probe makes it flat) and a DataLoader's pin-memory
# thread pinning batches it fetched ahead. Before the first step, where the window opens: the same, the head
# re-drawn from the window key (a weight drawn, scaled and copied in; a bias zeroed), and the batch source keyed
# (chapter 09's ranks draw their sample order: randperm). Any other operator there, on any
# thread, ran outside every step's range: training the counts never see (red team 23 trained the window's batches
# in a state_dict hook at the close, red team 24 in a batch source's callback of its own at the open). Kernel
# launches there must come from these operators (a CUDA graph's replay is no operator at all). On a CPU a compiled
# region (torch.compile's kernels, run from a thread of the script's) records almost no operator but its range: the
# harness opens none there, so any range there is foreign too (on a GPU such kernels are launches).
# the harness's copies of weights and batches, and what a loader's pin-memory thread runs at any moment: a batch
# rebuilt from a worker's shared memory (set_ on an empty tensor) and pinned (an H200 trace of chapter 07 held four
# set_ before its first step's range)
HARNESS_COPIES = r"detach|to|_to_copy|empty_strided|empty|empty_like|copy_|clone|cat|reshape|view|_reshape_alias|" \
                 r"_unsafe_view|alias|lift_fresh|contiguous|is_pinned|pin_memory|_pin_memory|set_"
AFTER_LAST_STEP = re.compile(rf"^(?:aten::)?(?:{HARNESS_COPIES})$")
BEFORE_FIRST_STEP = re.compile(rf"^(?:aten::)?(?:{HARNESS_COPIES}|randn|normal_|mul|zeros|zero_|randperm|resize_|"
                               r"scalar_tensor)$")
LAUNCH = re.compile(r"^cu(?:da)?(?:LaunchKernel|LaunchCooperativeKernel|GraphLaunch|LaunchHostFunc)")


def outside_the_steps(events: pd.DataFrame, steps: pd.DataFrame) -> str | None:
    """Why the trace's host work before its first step's range or after its last one is more than the harness's
    own, or None."""
    if steps.empty:
        return None
    first, last = int(steps["start_ns"].min()), int(steps["end_ns"].max())
    host = events[events["device"].isna()]
    cpu = not events["device"].notna().any()
    return (_foreign_work(host[host["start_ns"] < first], BEFORE_FIRST_STEP, "before its first step's range opened",
                          "the harness only re-draws the head and keys the batches there", first, before=True,
                          ranges=cpu)
            or _foreign_work(host[host["start_ns"] > last], AFTER_LAST_STEP,
                             "after its last step's range closed, before the grader had the weights",
                             "the harness only copies the weights there", last, before=False, ranges=cpu))


def _foreign_work(host: pd.DataFrame, allowed: re.Pattern, where: str, harness: str, edge: int,
                  before: bool, ranges: bool = False) -> str | None:
    ops = host[host["kind"] == "cpu_op"]
    foreign = ops[~ops["name"].astype(str).str.match(allowed).to_numpy(bool)]
    if ranges:  # a CPU trace: a range there (a compiled region's) is no harness's
        foreign = pd.concat([foreign, host[host["kind"] == "range"]])
    if len(foreign):
        nearest = foreign.sort_values("start_ns").iloc[-1 if before else 0]
        gap_ms = abs(edge - int(nearest["start_ns"])) / 1e6
        shown = ", ".join(foreign["name"].astype(str).value_counts().index[:4])
        return (f"runs {len(foreign):,} operator(s) {where} ({shown}; the nearest {gap_ms:.1f} ms from it): "
                f"{harness}, so this is work no step's range holds and no count sees")
    launches = host[(host["kind"] == "cuda_api") & host["name"].astype(str).str.match(LAUNCH).to_numpy(bool)]
    if launches.empty or ops.empty:  # a trace without operators (Nsight Systems') cannot say whose a launch is
        return None
    held = np.zeros(len(launches), bool)
    at, tid = launches["start_ns"].to_numpy(np.int64), launches["tid"].to_numpy()
    for start, stop, thread in ops[["start_ns", "end_ns", "tid"]].itertuples(index=False):
        held |= (tid == thread) & (at >= start) & (at < stop)
    if not held.all():
        return (f"launches {int((~held).sum()):,} kernel(s) or graph(s) {where}, outside the harness's own operators "
                f"(the first: {launches['name'].astype(str).iloc[int(np.argmin(held))]}): work no step's range holds")
    return None


def trace_problem(trace, run: RunResult, first_step: int, trace_steps: int, device: str,
                  excuse_data_wait: bool = False) -> str | None:
    """Why a trace cannot be the record of ``run``, or None when it can.

    The harness traces exactly the steps first_step .. first_step+trace_steps-1, once each (the steps after the
    warm-up in a traced run; the steps after the window in a timed run with a traced tail). The grader stamped the
    same steps on its own clock as they started, so the span of the trace's steps must match the span the
    grader saw (give or take the profiler's own cost), and every step must hold work. On a CPU, where speed is
    not graded and so hidden work costs a submission nothing, the trace must also account for the steps: most
    of their time in recorded ops (hidden_work), and no aten op running a model's or an optimizer's Python code
    (an op replaced to hold the step out of the count's sight).
    """
    steps = trace.get_steps()
    expected = list(range(first_step, first_step + trace_steps))
    found = sorted(int(s) for s in steps["step"])
    if found != expected:
        shown = ", ".join(map(str, found[:12])) + (" ..." if len(found) > 12 else "")
        return (f"holds step ranges [{shown or 'none'}], but the harness ran steps {expected[0]}..{expected[-1]} "
                "once each: step ranges were added, removed or renamed")
    # the grader's last stamp comes after the harness synchronized the device, so the traced steps end where their
    # GPU work ends, not where the host finished launching it: a GPU-bound run whose host ran ahead of the kernels
    # (the queue empty when the traced steps began) ended its step ranges long before its kernels, and an honest
    # lab of chapter 05 was once refused for it (43.8 ms of step ranges against 128.5 ms stamped, on an H100)
    events = trace.events
    gpu_work = events[events["device"].notna() & events["step"].isin(expected)]
    last_ns = max(int(steps["end_ns"].max()), int(gpu_work["end_ns"].max()) if len(gpu_work) else 0)
    span_ns = last_ns - int(steps["start_ns"].min())
    stamps = run.trace_stamps_ns
    if len(stamps) >= 2:
        stamped_ns = stamps[-1] - stamps[0]
        if abs(span_ns - stamped_ns) > 0.25 * stamped_ns + 50e6:
            return (f"spans {span_ns / 1e6:.1f} ms of steps, but the grader saw those steps take "
                    f"{stamped_ns / 1e6:.1f} ms: it is not the record of the run that was graded")
    worked = events[events["step"].notna() & events["kind"].isin(["cpu_op", "cuda_api", "kernel"])]
    idle = sorted(set(expected) - {int(s) for s in worked["step"].unique()})
    if idle:
        return (f"shows no work in step(s) {', '.join(map(str, idle[:8]))}: the training ran somewhere the trace "
                "does not show it")
    if problem := outside_the_steps(events, steps):
        return problem
    if device != "cpu":
        return None
    return elsewhere(run, excuse_data_wait) or hidden_work(events, steps, excuse_data_wait,
                                                           script=getattr(run, "copy", None))


def elsewhere(run: RunResult, loader_workers: bool) -> str | None:
    """Why work of the window was done by another process under the run (a trace records the run's own process
    only), or None. A chapter about loading data has loader workers of its own; there the loader's checks judge
    them. ``window_cpu_ns`` is the grader's reading of every process's CPU time (checker.grader.sandbox)."""
    if loader_workers or not getattr(run, "window_cpu_ns", None):
        return None
    own, others = run.window_cpu_ns
    if others <= max(OTHER_PROCESS_SHARE * own, OTHER_PROCESS_FLOOR_NS):
        return None
    return (f"does not record all of the window's work: other processes under the run ran "
            f"{others / 1e6:.1f} ms on a CPU in the timed window ({others / max(own, 1):.1%} of the training process's "
            f"{own / 1e6:.0f} ms). A trace records the training process only: what they computed (a value read, a "
            "step's work) is out of its sight. Train and read your values in the script's own process")


def covered_share(starts: np.ndarray, ends: np.ndarray, begin: int, end: int) -> float:
    """The share of [begin, end) that the union of the intervals covers."""
    if end <= begin:
        return 0.0
    s, e = merge(np.clip(starts, begin, end), np.clip(ends, begin, end))
    return float((e - s).sum()) / (end - begin)


def op_coverage(events, steps, excuse_data_wait: bool = False) -> list[float]:
    """Per traced step, the share of its time that recorded PyTorch ops (on any thread) cover. With
    ``excuse_data_wait``, the time the step waited for its batch is left out of the step."""
    from checker.trace.analyses.dataloader import data_wait

    # a rank of a data-parallel job spends part of its step in a collective, on the backend's own thread (gloo's
    # range): time the profiler saw, waiting for another rank (checker.trace.analyses.collectives)
    collective = (events["kind"] == "range") & events["name"].astype(str).str.contains(COLLECTIVE_RUN)
    ops = events[events["step"].notna() & ((events["kind"] == "cpu_op") | collective)]
    waits = dict(zip(*data_wait(events, steps)[["step", "data_wait_ns"]].to_numpy().T)) if excuse_data_wait else {}
    shares = []
    for row in steps.itertuples():
        mine = ops[ops["step"] == row.step]
        begin, end = int(row.start_ns), int(row.end_ns)
        covered = covered_share(mine["start_ns"].to_numpy(np.int64), mine["end_ns"].to_numpy(np.int64), begin, end)
        shares.append(covered * (end - begin) / max(end - begin - int(waits.get(row.step, 0)), 1))
    return shares


def hidden_work(events, steps, excuse_data_wait: bool = False, script: Path | None = None) -> str | None:
    """Why a CPU trace's steps are not what ran in them, or None: recorded ops must cover most of each step,
    and no top-level aten op may run training code (a model, an optimizer, the workload, or the run's own
    ``script``: a step written out in the script and run as an op's kernel), nor a backward pass, an optimizer's step
    or operators called from Python (nested_training). With ``excuse_data_wait`` (chapters about loading data), the
    time a step waited for its batch is left out of the step: waiting is the lesson there, not hidden work."""

    shares = op_coverage(events, steps, excuse_data_wait)
    share = float(np.median(shares)) if shares else 0.0
    if share < OP_COVERAGE_FLOOR:
        waiting = " not spent waiting for data" if excuse_data_wait else ""
        return (f"shows PyTorch ops in only {share:.0%} of each step's time{waiting} (the median over {len(shares)} "
                f"steps; a step that trains in PyTorch shows at least {OP_COVERAGE_FLOOR:.0%}): the rest ran where the "
                "profiler could not see it (recording switched off, another process, or code outside PyTorch), so "
                "its counts are not the step's")
    unrecorded = unrecorded_operators(events)
    if unrecorded:
        return unrecorded
    python = events[events["step"].notna() & (events["kind"] == "python")]
    training = TRAINING_CODE if script is None else f"(?:{TRAINING_CODE}|{re.escape(str(script))}\\()"
    names = python["name"].astype(str)
    # training code by its place (a model, an optimizer, the workload, the script), or any Python not of torch or
    # the standard library: an aten op runs no other Python (autograd's anomaly mode and activation checkpointing
    # run torch's and the standard library's), so a module the script wrote at run time and imported, under any
    # name (a library's too), is no library here, whatever it calls
    foreign = {name: _foreign_frame(name) for name in names.unique()}  # a frame's name repeats once per call
    python = python[(names.str.match(training) | names.map(foreign)).to_numpy(bool)]
    if python.empty:
        return nested_training(events)
    ops = events[events["step"].notna() & (events["kind"] == "cpu_op")]
    for tid, calls in python.groupby("tid"):
        starts = np.sort(calls["start_ns"].to_numpy(np.int64))
        held = top_level_aten_ops(ops[ops["tid"] == tid])
        inside = (np.searchsorted(starts, held["end_ns"].to_numpy(np.int64), side="left")
                  - np.searchsorted(starts, held["start_ns"].to_numpy(np.int64), side="right"))
        if (inside > 0).any():
            worst = int(np.argmax(inside))
            op = held.iloc[worst]
            return (f"holds {op['name']} running the training's Python code ({int(inside[worst])} calls of a model, "
                    f"an optimizer, the workload or code from outside torch and Python's own library inside it, in "
                    f"step {int(op['step'])}): an aten op runs no such code unless it was replaced, here to run the "
                    "step where the count of ops cannot see it")
    return nested_training(events)


def nested_training(events: pd.DataFrame) -> str | None:
    """Why a top-level aten op of the steps ran training inside itself, or None: a backward pass or an optimizer's
    step (NESTED_TRAINING, by its record's name), or operators called from Python code that the op called back
    (a hook), each nested where the top-level counts do not look."""
    in_steps = events[events["step"].notna()]
    ops = in_steps[in_steps["kind"] == "cpu_op"]
    python = in_steps[in_steps["kind"] == "python"]
    for tid, mine in ops.groupby("tid"):
        held = top_level_aten_ops(mine).sort_values("start_ns")
        if held.empty:
            continue
        starts, ends = held["start_ns"].to_numpy(np.int64), held["end_ns"].to_numpy(np.int64)

        def holder(at: np.ndarray) -> np.ndarray:
            """Per time, the index of the top-level op holding it, or -1."""
            index = np.searchsorted(starts, at, side="right") - 1
            inside = (index >= 0) & (at < ends[np.clip(index, 0, None)])
            return np.where(inside, index, -1)

        names = mine["name"].astype(str)
        nested = mine[names.str.match(NESTED_TRAINING).to_numpy(bool)]
        nested = nested[holder(nested["start_ns"].to_numpy(np.int64)) >= 0]
        if len(nested):
            first = nested.iloc[0]
            op = held.iloc[int(holder(np.array([first["start_ns"]], np.int64))[0])]
            return (f"holds {len(nested)} record(s) of a backward pass or an optimizer's step inside {op['name']} "
                    f"(the first: {str(first['name'])[:80]}, in step {int(first['step'])}): an aten op never runs "
                    "them; a hook run inside its dispatch hid them from the top-level counts")
        calls = python[python["tid"] == tid]
        calls = calls[holder(calls["start_ns"].to_numpy(np.int64)) >= 0]
        if calls.empty:
            continue
        inner = mine[names.str.startswith("aten::").to_numpy(bool) & ~mine.index.isin(held.index)]
        outer = holder(inner["start_ns"].to_numpy(np.int64))
        inner, outer = inner[outer >= 0], outer[outer >= 0]
        at = inner["start_ns"].to_numpy(np.int64)
        in_python = np.zeros(len(at), bool)
        for start, end in zip(calls["start_ns"].to_numpy(np.int64), calls["end_ns"].to_numpy(np.int64)):
            in_python |= (at >= start) & (at < end)
        base = inner["name"].astype(str).map(aten_base_name).to_numpy(object)
        # per top-level op: its own name and what it runs outside any Python (its own decomposition)
        own = {i: {aten_base_name(str(held["name"].iloc[i]))} for i in np.unique(outer)}
        for i, name in zip(outer[~in_python], base[~in_python]):
            own[i].add(name)
        # what Python called: the outermost of the ops run inside Python (an op's own inner ops are its own)
        called = inner.index.isin(top_level_aten_ops(inner[in_python]).index)
        hidden = np.array([c and name not in NO_WORK and name not in own[i]
                           for c, i, name in zip(called, outer, base)], bool)
        if hidden.any():
            first = inner[hidden].iloc[0]
            op = held.iloc[int(outer[hidden][0])]
            return (f"holds {int(hidden.sum())} op(s) called from Python inside {op['name']} (the first: "
                    f"{first['name']}, in step {int(first['step'])}): Python run inside an op's dispatch (a hook, a "
                    "dispatch mode) may run that op again, never other work; a step's work hidden there is out of "
                    "the top-level counts' sight")
    return None


@functools.cache  # the same frames recur in the baseline's and the candidate's traces: each file looked up once
def _foreign_frame(name: str) -> bool:
    """A Python frame of a file that is not torch's, the standard library's or the harness's as installed here
    ('/tmp/x/helper.py(12): step'; 'einops/helper.py(3): run' where einops holds no such file): any other
    library's too. The file must be where that package is installed: a folder of the run's named 'torch' is not
    torch."""
    match = FRAME.match(name)
    if not match:
        return False
    path = Path(match.group("path").replace("\\", "/"))
    absolute = path.is_absolute()
    if absolute:
        path = path.resolve()
    for package, root in _trusted_places():
        if absolute:
            place = root / package if package else root
            if path.is_relative_to(place) and path.is_file() \
                    and not {"site-packages", "dist-packages"} & set(path.relative_to(place).parts):
                return False
        elif (not package or path.parts[0] == package) and (root / path).is_file():
            return False
    return True


@functools.cache
def _trusted_places() -> tuple[tuple[str, Path], ...]:
    """(package, the folder holding it) for torch and this workbook's harness, whose frames are named from that
    folder ('torch/nn/functional.py'), and ('', folder) for the standard library's."""
    import importlib.util
    import sysconfig

    torch = importlib.util.find_spec("torch")  # where it is installed, without importing it into the grader
    places = [("torch", Path(torch.origin).resolve().parent.parent),
              ("checker", Path(__file__).resolve().parent.parent.parent)]
    places += [("", Path(sysconfig.get_paths()[key]).resolve()) for key in ("stdlib", "platstdlib")]
    return tuple(dict.fromkeys(places))


def unrecorded_operators(events: pd.DataFrame) -> str | None:
    """Why ops ran in the steps with the profiler's op recording switched off, or None. The Python tracer names each
    call of a PyTorch operator from Python (``<built-in method sigmoid of type object ...>``, ``<built-in function
    gelu>``); such a call always dispatches an aten op of its name, which the profiler records inside it, unless
    recording was switched off around it (``torch.autograd._enable_record_function(False)``, by any name)."""
    python = events[events["step"].notna() & (events["kind"] == "python")]
    if python.empty:
        return None
    switches = python[python["name"].astype(str).str.match(PROFILER_SWITCH)]
    if len(switches):
        return (f"switches what the profiler records {len(switches)} time(s) in its steps (the first: "
                f"{str(switches['name'].iloc[0]).split(' of ')[0].removeprefix('<built-in method ')} in step "
                f"{int(switches['step'].iloc[0])}): the ops between the switches are missing from the trace, so its "
                "counts are not the step's")
    below = python[python["name"].astype(str).str.match(BELOW_THE_HOOK)]
    if len(below):
        return (f"holds {len(below)} redispatch(es) of PyTorch operators from Python (the first in step "
                f"{int(below['step'].iloc[0])}): a redispatch runs its operator below the profiler's hook, which "
                "records no op for it, so the trace's counts are not the step's")
    groups = python["name"].astype(str).str.extract(OPERATOR_CALL, expand=True)  # a method's name, or a function's
    called = groups[0].fillna(groups[1])  # (not bfill(axis=1): pandas transposes for it, a minute on a long trace)
    calls = python[called.isin(RECORDED_OPERATORS).to_numpy()]
    if calls.empty:
        return None
    ops = events[events["step"].notna() & (events["kind"] == "cpu_op")]
    empty, first = 0, None
    for tid, group in calls.groupby("tid"):
        op_starts = np.sort(ops[ops["tid"] == tid]["start_ns"].to_numpy(np.int64))
        starts, ends = group["start_ns"].to_numpy(np.int64), group["end_ns"].to_numpy(np.int64)
        held = np.searchsorted(op_starts, ends, side="right") - np.searchsorted(op_starts, starts, side="left")
        empty += int((held == 0).sum())
        if first is None and (held == 0).any():
            first = group.iloc[int(np.argmax(held == 0))]
    if empty <= UNRECORDED_ALLOWED:
        return None
    return (f"holds {empty} call(s) of PyTorch operators from Python that recorded no op (the first: "
            f"{str(first['name']).split(' at 0x')[0]} in step {int(first['step'])}): an operator called from Python "
            "always runs an aten op the profiler records, unless op recording was switched off around it, so the "
            "trace's counts are not the step's")


def ask_referee(chapter: Chapter, device: str, pairs: list[tuple[RunResult, RunResult]],
                workdir: Path, cfg: dict[str, Any] | None = None) -> dict[int, dict[str, Any]]:
    """Have the referee judge every pair's weights; by pair index: {"baseline": {...}, "candidate": {...}}."""
    folder = Path(tempfile.mkdtemp(prefix="referee-", dir=workdir))
    os.chmod(folder, 0o700)
    runs = []
    for index, (baseline, candidate) in enumerate(pairs):
        for role, run in (("baseline", baseline), ("candidate", candidate)):
            name = f"{role}{index}"
            path = folder / f"{name}.pt"
            path.write_bytes(run.weights or b"")
            entry = {"name": name, "seed": run.seed, "window_key": run.window_key, "weights": str(path),
                     "reference": f"baseline{index}" if role == "candidate" else None}
            if run.update_probe is not None:
                probe = folder / f"{name}-updates.pt"
                probe.write_bytes(run.update_probe)
                entry.update(updates=str(probe), probe_steps=list(run.probe_steps))
            runs.append(entry)
    job = folder / "job.json"
    job.write_text(json.dumps({"chapter": chapter.id, "device": device, "runs": runs, "cfg": cfg or {}}))
    proc = forkserver.run_module("checker.grader.referee", [str(job)], dict(os.environ, PYTHONDONTWRITEBYTECODE="1"),
                                 timeout=REFEREE_TIMEOUT_S)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise WorkbookError(f"the referee could not judge the weights (exit {proc.returncode}): {last}")
    found = json.loads(proc.stdout.strip().splitlines()[-1])
    for path in folder.glob("*.pt"):
        path.unlink()
    return {index: {"baseline": found[f"baseline{index}"], "candidate": found[f"candidate{index}"]}
            for index in range(len(pairs))}
