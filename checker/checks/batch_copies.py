"""batch_copies: every training step copies its batch to the GPU, as many bytes as the slow script's step copies.

A chapter whose lesson is the copy of each batch to the device (chapter 02) has a second road to its speed when
its batches repeat: keep them on the GPU and copy nothing. The speed then says nothing about the copy. This check
counts, step by step in the traced window, the host-to-device bytes each step launched (pinned or pageable: both
trace tools give a copy's bytes), and holds every step, not their median, to the slow script's per-step bytes
over the same steps: each must copy at least ``threshold`` (a share) of the slow script's median step. Only the
last traced step is spared (a script that copies each batch one step ahead, as chapter 02's stretch solution does,
has nothing to copy there). A step that trained on a batch kept
on the device copies nothing and fails it; so does a window that copies every batch at once in one step.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from checker.checks import BASELINE_TRACE, FAILED, PASSED, TRACE, check, result
from checker.trace.analyses.ops import direct_holders
from checker.trace.analyses.syncs import FETCH_RANGE, HARNESS_CODE, frame_origin, in_fetch
from checker.trace.analyses.stack import call_of, frame_rows_of
from checker.trace.kineto import MOVE_OPS


def _first_steps(by_step: dict, shown=str) -> str:
    """'step (value), ...' for the first five steps of ``by_step``."""
    first = ", ".join(f"{step} ({shown(value)})" for step, value in sorted(by_step.items())[:5])
    return first + (", ..." if len(by_step) > 5 else "")


def bytes_per_step(trace) -> tuple[dict[int, float], int]:
    """Host-to-device bytes launched in each step of ``trace`` (every step listed, 0 where none), and how many of
    its copies gave no byte count."""
    steps = [int(step) for step in trace.get_steps()["step"]]
    copies = trace.get_copies()
    to_device = copies[copies["copy_kind"] == "HtoD"]
    unknown = int(to_device["bytes"].isna().sum())
    per_step = to_device.groupby("step")["bytes"].sum(min_count=1).fillna(0)
    return {step: float(per_step.get(step, 0)) for step in steps}, unknown


@check("batch_copies", needs=(TRACE, BASELINE_TRACE), key="least_share", fmt="{:.0%} of the slow script's bytes")
def batch_copies(evidence, spec):
    """every training step copies its batch to the GPU: at least the slow script's host-to-device bytes per step"""
    share = float(spec.threshold_for(evidence.device))
    candidate, candidate_unknown = bytes_per_step(evidence.trace())
    baseline, baseline_unknown = bytes_per_step(evidence.trace("baseline"))
    if not candidate or not baseline:
        return result(spec, FAILED, threshold=share, evidence=["the trace holds no training steps: nothing to count"])
    ordered = sorted(baseline.values())
    expected = ordered[len(ordered) // 2]
    if expected <= 0:
        why = (f"{baseline_unknown} of its copies give no byte count" if baseline_unknown
               else "it copies nothing to the device")
        return result(spec, FAILED, threshold=share, evidence=[
            f"the slow script's trace cannot say how many bytes a step copies ({why}): the check cannot be judged"])
    floor = expected * share
    short = {step: copied for step, copied in candidate.items() if copied < floor}
    last = max(candidate)
    # a prefetcher copies each batch one step ahead, so the last traced step has no next batch to copy: it alone
    # may copy less (one step's copy of many: no speed to be had from it)
    spared = short.pop(last, None) if len(candidate) > 1 else None
    least = min(copied for step, copied in candidate.items() if step != last or spared is None)
    measured = {
        "baseline_mb_per_step": round(expected / 1e6, 3),
        "candidate_least_mb": round(least / 1e6, 3),
        "candidate_median_mb": round(sorted(candidate.values())[len(candidate) // 2] / 1e6, 3),
        "least_share": round(least / expected, 4),
        "steps_short": len(short),
        "steps": len(candidate),
        "trace_tool": evidence.trace_tool,
    }
    lines = [f"the least a traced step copies to the device: {least / 1e6:,.1f} MB; the slow script's step copies "
             f"{expected / 1e6:,.1f} MB"]
    if short:
        shown = _first_steps(short, lambda copied: f"{copied / 1e6:,.1f} MB")
        lines.append(f"{len(short)} of {len(candidate)} traced steps copy less than {floor / 1e6:,.1f} MB: "
                     f"{shown}. A step that trains on data already on the "
                     "device, or copies its batch in another step, does not count as copying it")
    if spared is not None:
        lines.append(f"the last traced step ({last}) copies {spared / 1e6:,.1f} MB: a script that copies each batch a "
                     "step ahead has nothing left to copy there, so it is not held to the rest")
    if candidate_unknown:
        lines.append(f"{candidate_unknown} host-to-device copies in the steps give no byte count and count as none")
    status = PASSED if not short else FAILED
    return result(spec, status, measured=measured, threshold=share, evidence=lines)


# the Python call the DataLoader's collation makes its tensors with (torch.tensor of a list of numbers): it records
# an aten::to that moves nothing
_MAKES_TENSOR = "<built-in method tensor of type object"


def moves_by_step(trace) -> pd.DataFrame:
    """The copies a trace's steps asked for: every aten::to, aten::_to_copy, aten::copy and aten::copy_ whose
    arguments the trace recorded (``meta["moves"]``) and that no other CPU op of its thread holds, or that the
    script's own Python asked for inside one (an op's own conversions inside it are its business, not a copy the step asked for), but for
    those ``torch.tensor`` makes while the harness fetches a batch (the DataLoader's collation). Columns: step, key
    (the tensor read: shape and dtype), lead (its first dimension), elements, move (it may change the device), queued
    (non_blocking=True), made (by torch.tensor),
    start_ns and tid (the op's)."""
    found = (getattr(trace, "meta", None) or {}).get("moves") or {}
    columns = ["step", "key", "lead", "elements", "move", "queued", "made", "start_ns", "tid"]
    if not found.get("start_ns"):
        return pd.DataFrame(columns=columns)
    events = trace.events
    kinds, names = events["kind"].to_numpy(), events["name"].astype(str).to_numpy()
    starts, tids = events["start_ns"].to_numpy(np.int64), events["tid"].to_numpy(np.int64)
    rows = np.flatnonzero((kinds == "cpu_op") & np.isin(names, list(MOVE_OPS)) & events["step"].notna().to_numpy())
    made = np.array([str(call or "").startswith(_MAKES_TENSOR) for call in call_of(events, rows)], dtype=bool)
    collated = in_fetch(events, rows) & made
    # a copy the step asked for: one no CPU op holds, or one the script's own Python asked for inside an op (an
    # operator it registered with torch.library, the backward of an autograd.Function of its own: their bodies are
    # its code, red team 71's opcopy_01); inside an op of torch's, with no such Python between, a conversion is that
    # op's own
    all_rows, holder = direct_holders(events)
    is_move = np.isin(names[all_rows], list(MOVE_OPS))
    move_rows, move_holder = all_rows[is_move], holder[is_move]
    python = kinds == "python"
    scripts = python & np.isin(names, [name for name in np.unique(names[python])
                                       if frame_origin(str(name)) in ("user", "grader")])
    frame = frame_rows_of(events, move_rows, scripts)
    asked = (move_holder < 0) | (frame > move_holder)
    top = {(int(tids[r]), int(starts[r])) for r in move_rows[asked].tolist()}
    step_of = {(int(tid), int(start)): (int(step), bool(by_tensor)) for tid, start, step, by_tensor, skip
               in zip(tids[rows], starts[rows], events["step"].to_numpy()[rows], made, collated)
               if not skip and (int(tid), int(start)) in top}
    kept = []
    for start, tid, key, lead, elements, move, queued in zip(found["start_ns"], found["tid"], found["key"],
                                                              found["lead"], found["elements"], found["move"],
                                                              found["queued"]):
        if (found_step := step_of.get((int(tid), int(start)))) is not None:
            step, by_tensor = found_step
            kept.append((step, key, int(lead), int(elements), bool(move), queued is True, by_tensor, int(start),
                         int(tid)))
    return pd.DataFrame(kept, columns=columns)


def batch_moves(moves: pd.DataFrame, batch_size: int) -> pd.DataFrame:
    """Of a trace's copies (moves_by_step), those to a device of tensors of ``batch_size`` rows: the batch's."""
    return moves[moves["move"].astype(bool) & (moves["lead"] == batch_size)]


def device_moves(moves: pd.DataFrame, batch_size: int) -> pd.DataFrame:
    """Of a trace's copies (moves_by_step), those that may change a tensor's device, of any shape: all but a constant
    made from Python numbers smaller than a batch's labels (``torch.tensor(MEAN, device=...)``, as the workload's
    normalization makes its mean: torch.tensor of a batch's values needs a read first, which host_syncs counts)."""
    return moves[moves["move"].astype(bool) & ~(moves["made"].astype(bool) & (moves["elements"] < batch_size))]


def blocking_moves(moves: pd.DataFrame, batch_size: int) -> pd.DataFrame:
    """Of a trace's copies (moves_by_step), the blocking ones to a device (device_moves not queued)."""
    moves = device_moves(moves, batch_size)
    return moves[~moves["queued"].astype(bool)]


def batch_work_before_copy(trace, batch_size: int, moves: pd.DataFrame | None = None) -> dict[int, int]:
    """Per traced step with a copy of its batch to the device: the script's top-level ops that read a tensor of the
    batch's before that tensor's copy, on the copy's thread, after the harness's fetch. Before the step's first batch
    copy, an op reading any tensor of the batch's rows counts; between two batch copies, one reading a tensor of the
    next copy's shape (the labels copied first, then the images cloned: red team 72's labelsfirst_02), so that the
    model's work on the batch already copied does not. On a GPU each is host work on the batch (a clone, a cast,
    arithmetic, a concatenation) that makes a tensor in pageable memory, and the queued copy then reads that, not the
    pinned batch the loader handed over: it blocks whatever ``non_blocking`` says (red teams 69-72's pagenb_02,
    unpinned_02, catlist_02). The copies themselves are not counted. Empty where the trace recorded no inputs' sizes.

    The script's: an op whose innermost frame of the script's or the harness's is the script's (the harness runs the
    whole script, so a frame of it holds everything; its own audit of a fetched batch clones it after the fetch's
    range, and the loader's iterator it drives rebuilds the batch's tensors there). Work inside the fetch (a wrapper
    of the loader's iterator) is the loader's and not counted. ``moves``: the trace's moves_by_step, where the caller
    has them already."""
    moves = batch_moves(moves_by_step(trace) if moves is None else moves, batch_size)
    inputs = (getattr(trace, "meta", None) or {}).get("op_inputs") or {}
    if moves.empty or not inputs.get("inputs"):
        return {}
    starts = np.asarray(inputs["start_ns"], dtype=np.int64)
    tids = np.asarray(inputs["tid"], dtype=np.int64)
    shapes = inputs["inputs"]
    events = trace.events
    rows, holder = direct_holders(events)
    rows = rows[holder < 0]
    names = events["name"].astype(str).to_numpy()
    python = (events["kind"] == "python").to_numpy()
    frames = [n for n in np.unique(names[python]) if HARNESS_CODE.search(n) or frame_origin(n) == "user"]
    inner = frame_rows_of(events, rows, python & np.isin(names, frames))
    rows = rows[np.array([f < 0 or not HARNESS_CODE.search(names[f]) for f in inner.tolist()], dtype=bool)]
    rows = rows[~np.isin(names[rows], list(MOVE_OPS))]
    scripts = set(zip(events["tid"].to_numpy(np.int64)[rows].tolist(),
                      events["start_ns"].to_numpy(np.int64)[rows].tolist()))
    fetches = events[(events["kind"] == "range") & (events["name"] == FETCH_RANGE)]
    bounds = trace.get_steps().set_index("step")
    counts = {}
    for step, copies in moves.groupby("step"):
        copies = copies.sort_values("start_ns")
        tid = int(copies["tid"].iloc[0])
        copies = copies[copies["tid"] == tid]
        lower = int(bounds.loc[step, "start_ns"]) if step in bounds.index else int(copies["start_ns"].iloc[0])
        done = fetches[(fetches["tid"] == tid) & (fetches["end_ns"] <= int(copies["start_ns"].iloc[0]))
                       & (fetches["end_ns"] > lower)]
        if len(done):
            lower = int(done["end_ns"].max())
        found = 0
        for k, (at, key) in enumerate(zip(copies["start_ns"].astype(np.int64), copies["key"])):
            shape = _shape_of(key)
            here = np.flatnonzero((tids == tid) & (starts > lower) & (starts < at))
            for i in here:
                if (int(tids[i]), int(starts[i])) not in scripts:
                    continue
                if any(s == shape or (k == 0 and s and s[0] == batch_size) for s in shapes[i]):
                    found += 1
            lower = max(lower, int(at))
        counts[int(step)] = found
    return counts


def _shape_of(key: str) -> tuple[int, ...] | None:
    """A copy's ``key`` ("[8,3,32,32] float") -> (8, 3, 32, 32)."""
    dims = key.split(" ", 1)[0]
    try:
        return tuple(int(d) for d in dims.strip("[]").split(",") if d)
    except ValueError:
        return None


@check("queued_copies", needs=(TRACE, BASELINE_TRACE), key="blocking_copies", fmt="{:g} blocking copies")
def queued_copies(evidence, spec):
    """every training step asks for its batch's copies to the device queued (non_blocking=True), each one"""
    allowed = int(spec.threshold_for(evidence.device))
    batch_size = int(evidence.cfg["batch_size"])
    moves = moves_by_step(evidence.trace())  # read once: the batch's copies and the blocking ones are both of these
    candidate = batch_moves(moves, batch_size)
    base_moves = moves_by_step(evidence.trace("baseline"))
    baseline = batch_moves(base_moves, batch_size)
    steps = sorted(int(step) for step in evidence.trace().get_steps()["step"])
    base_steps = sorted(int(step) for step in evidence.trace("baseline").get_steps()["step"])
    if baseline.empty or not steps or not base_steps:
        return result(spec, FAILED, threshold=allowed, evidence=[
            "the slow script's trace records no copy of its batch to the device (or no step, or no recorded "
            "arguments: record_shapes), so what a step must copy is unknown: the check cannot be judged"])
    per_step = baseline.groupby("step").size()
    counts = sorted(int(per_step.get(step, 0)) for step in base_steps)
    expected = counts[len(counts) // 2]
    queued = candidate[candidate["queued"].astype(bool)].groupby("step").size()
    # any blocking copy counts, of the batch or of anything made from it: a 1-row view of the batch (images[None]),
    # its rows one by one, beside queued decoys of the batch's shape (red team 69's decoy_02, decoy_07)
    blocking = blocking_moves(moves, batch_size).groupby("step").size()
    last = steps[-1]
    # a prefetcher asks for the next step's batch a step ahead: the last traced step may ask for none
    short = {step: int(queued.get(step, 0)) for step in steps
             if int(queued.get(step, 0)) < expected and (step != last or len(steps) == 1)}
    blocked = {step: int(blocking.get(step, 0)) for step in steps if int(blocking.get(step, 0))}
    # the batch copied as the loader handed it over: host work on it first makes the copy's source another tensor
    mine_before = batch_work_before_copy(evidence.trace(), batch_size, moves)
    theirs_before = batch_work_before_copy(evidence.trace("baseline"), batch_size, base_moves)
    usual = sorted(theirs_before.values())[len(theirs_before) // 2] if theirs_before else 0
    worked = {step: n for step, n in mine_before.items() if n > theirs_before.get(step, usual)}
    total_blocking = sum(blocked.values())
    measured = {"blocking_copies": total_blocking, "steps_blocking": len(blocked), "steps_short": len(short),
                "baseline_copies_per_step": expected, "least_queued": min(int(queued.get(s, 0)) for s in steps),
                "steps": len(steps)}
    shapes = ", ".join(sorted(set(baseline["key"])))
    lines = [f"the slow script's step copies {expected} tensor{'s' if expected != 1 else ''} of its batch to the "
             f"device ({shapes}); on a GPU each blocking copy stalls the CPU until it is done"]
    if blocked:
        lines.append(f"{total_blocking} copies to the device in {len(blocked)} of {len(steps)} traced steps block "
                     f"(non_blocking=False, or a copy_ that is not queued): {_first_steps(blocked)}")
    if short:
        lines.append(f"{len(short)} of {len(steps)} traced steps ask for fewer than {expected} queued copies of "
                     f"{batch_size}-row tensors: {_first_steps(short)}. A batch moved some "
                     "other way (a tensor made on the device from it, a copy of another shape) is not queued on a GPU")
    if worked:
        lines.append(f"{len(worked)} of {len(steps)} traced steps run ops on a tensor of the batch's rows between the "
                     f"fetch and the batch's copy, beyond the slow script's same step: {_first_steps(worked)}. On a "
                     "GPU that work (a clone, a cast, arithmetic) makes a tensor in pageable memory, and the copy "
                     "of it waits whatever non_blocking says: copy the batch the loader pinned, then work on the device")
    measured["steps_with_host_work_before_copy"] = len(worked)
    if not blocked and not short and not worked:
        lines.append(f"every traced step asks for its {expected} batch copies with non_blocking=True")
    status = PASSED if total_blocking <= allowed and not short and not worked else FAILED
    return result(spec, status, measured=measured, threshold=allowed, evidence=lines)
