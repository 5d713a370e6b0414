"""The shared shape of the checks that compare a per-step count with the slow script's (launches_per_step,
elementwise_kernels): this module registers no check."""

from __future__ import annotations

import numpy as np

from checker.checks import FAILED, PASSED, result
from checker.checks.evidence import own_native_code
from checker.trace.analyses.counts import with_loop_nests

# On a CPU no check grades the speed (a small shared machine moves it too much to hold a speedup), so a count could
# be lowered by a road that costs time: the arithmetic done in Python on values read out of tensors, or by ops of a
# library the counts cannot see, where no operator is counted. The lesson's fix is faster than the slow script on a
# CPU too; the candidate's traced steps may take at most this many times the slow script's, on the grader's clock.
CPU_SLOWER_AT_MOST = 2.0


def warmup_seconds(evidence) -> dict[str, float]:
    """Warm-up time (torch.compile included, outside the timed window) of the timed runs: the longest run's
    for the baseline and the candidate, and the candidate's shortest when it ran more than once (by then
    Inductor's on-disk cache holds what the first run compiled). Empty when no timed runs were made (--only)."""
    pairs = evidence.timed
    out = {}
    for label, runs in (("baseline", [b for b, _ in pairs]), ("candidate", [c for _, c in pairs])):
        values = [r.phases_s["warm-up"] for r in runs if "warm-up" in r.phases_s]
        if values:
            out[f"{label}_warmup_s"] = round(max(values), 2)
            if label == "candidate" and len(values) > 1:
                out["candidate_warmup_s_cached"] = round(min(values), 2)
    return out


def fewer_by(baseline: float, candidate: float) -> float:
    """How many times fewer the candidate has: baseline / candidate (inf when the candidate has none)."""
    if candidate <= 0:
        return float("inf") if baseline > 0 else 1.0
    return baseline / candidate


def fewer_than_baseline(evidence, spec, count, key: str, gone: str, decimals: int = 0, top: int = 5, more_evidence=None):
    """The result of a check that the candidate makes `threshold` times fewer of something per step.

    ``count(trace, device) -> StepCount`` counts it in a trace; the slow script's trace is made with the same
    tool over the same steps. ``key`` names the ratio in ``measured``; ``gone`` is said when none are left;
    ``more_evidence(candidate) -> list[str]`` adds lines of the check's own.
    """
    threshold = float(spec.threshold_for(evidence.device))
    trace = evidence.trace()
    candidate = count(trace, evidence.device)
    if evidence.device == "cpu":  # a compiled graph counts as the passes its generated code makes
        candidate = with_loop_nests(candidate, getattr(getattr(evidence, "candidate_run", None),
                                                       "compiled_loop_nests", None))
    baseline = count(evidence.trace("baseline"), evidence.device)
    if not candidate.steps or not baseline.steps:
        return result(spec, FAILED, threshold=threshold, evidence=["the trace holds no training steps: nothing to count"])
    if candidate.total == 0 and baseline.total > 0:  # not "infinitely fewer": the work is somewhere unseen
        return result(spec, FAILED, threshold=threshold, evidence=[
            f"the candidate's steps hold no {candidate.unit} at all where the slow script's hold "
            f"{baseline.per_step:,.0f} per step: the training ran where the trace does not show it"])
    ratio = fewer_by(baseline.per_step, candidate.per_step)
    measured = {
        "unit": candidate.unit,
        "baseline_per_step": round(baseline.per_step, 2),
        "candidate_per_step": round(candidate.per_step, 2),
        key: round(ratio, 2) if ratio != float("inf") else None,
        "steps": candidate.steps,
        "trace_tool": evidence.trace_tool,
        **{f"baseline_{k}": v for k, v in baseline.extra.items()},
        **{f"candidate_{k}": v for k, v in candidate.extra.items()},
        **warmup_seconds(evidence),  # torch.compile runs in the warm-up steps, outside the timed window
    }
    shown = gone if ratio == float("inf") else f"{ratio:.1f}x fewer"
    lines = [(f"{candidate.per_step:,.{decimals}f} {candidate.unit} per step vs the slow script's "
                 f"{baseline.per_step:,.{decimals}f}: {shown} (threshold {threshold:g}x)")]
    nested = _at_any_depth(baseline, candidate, threshold, measured, decimals, top_enough=ratio >= threshold)
    lines += nested[1:]
    in_time = _in_time(evidence, float(spec.options.get("cpu_slower_at_most", CPU_SLOWER_AT_MOST)), measured, lines)
    if candidate.top:
        lines.append(f"most per step here: {candidate.top_text(top)}")
    nests, calls = candidate.extra.get("compiled_loop_nests", 0), candidate.extra.get("compiled_graph_calls_per_step", 0)
    if nests > calls:
        lines.append(f"each compiled graph counts as the passes over memory its code makes: the C++ Inductor generated "
                     f"for this run holds {nests:,} loop nests (outermost loops, each module once a step), more than "
                     f"its {calls:g} graph calls per step; torch.compile's own fusion makes few")
    lines += more_evidence(candidate) if more_evidence else []
    if "candidate_warmup_s" in measured:
        cached = measured.get("candidate_warmup_s_cached")
        lines.append(f"warm-up before the timed window (torch.compile included): up to {measured['candidate_warmup_s']:g} s"
                        + (f", {cached:g} s once cached" if cached is not None else "")
                        + f"; {measured.get('baseline_warmup_s', 0):g} s for the slow script")
    inside = _inside_torch(evidence, measured, lines, trace)
    status = PASSED if ratio >= threshold and nested[0] and in_time and inside else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)


def _inside_torch(evidence, measured: dict, lines: list[str], trace=None) -> bool:
    """On a CPU, whether the candidate's traced run kept its step's arithmetic in PyTorch: no tensor crossed to numpy
    or DLPack in the window (exported, made over their memory, or a numpy view of one written), the count the run
    sends after its window (checker.candidate.session: Session._counts_crossings); and no tensor's values copied out
    to Python in the traced steps (``tolist``, ``torch.save`` to a buffer: the calls host_syncs counts as reads,
    checker.trace.analyses.syncs.python_reads), from where another library computes on them (red team 32 filled
    numpy arrays reached through pandas by ``tolist``); and no native code of the script's own mapped (a C extension
    it built: its loops record no op, whether fused or one call per small op, red team 44's percall_cext_04). Work
    done there records no op, so a count that fell by it fell by nothing the trace can see. On a GPU (each crossing a
    copy and a sync) or for a trace judged alone, True."""
    run = getattr(evidence, "candidate_run", None)
    if evidence.device != "cpu" or run is None:
        return True
    crossings = getattr(run, "tensor_views", None)
    if crossings is None:
        lines.append("the run sent no count of the tensors that crossed to numpy in its window: its ops cannot be "
                     "counted")
        return False
    copied = _copied_out(evidence, trace) if trace is not None else 0
    measured["crossings_to_numpy"] = crossings
    measured["values_copied_out"] = copied
    if crossings:
        lines.append(f"{crossings} tensor(s) crossed to numpy or DLPack in the window (.numpy(), np.asarray, "
                     "from_dlpack, from_numpy, as_tensor over an array, or a numpy view of a tensor written): "
                     "arithmetic done outside PyTorch records no op, so the count cannot see it; keep a step's work "
                     "in PyTorch and fuse it there")
    if copied:
        lines.append(f"{copied} time(s) a tensor's values were copied out to Python in the traced steps (.tolist(), "
                     "torch.save, .numpy()), logging steps aside: arithmetic done on them outside PyTorch records no "
                     "op, so the count cannot see it; keep a step's work in PyTorch and fuse it there")
    native = tuple(getattr(run, "native_code", ()) or ())
    if native:
        measured["native_code_of_its_own"] = len(native)
        lines.append(f"{own_native_code(native)} records no op however many loops it runs, one per small op or "
                     "one fused, so on a CPU the count cannot see its work; "
                     "fuse with torch.compile here, or check on a GPU, where its kernels are counted as launched")
    return not crossings and not copied and not native


ADDRESS_CALL = r"^<built-in method data_ptr of "


def _copied_out(evidence, trace) -> int:
    """How many calls in the trace's steps (logging steps aside) and between them copied a tensor's values out to
    Python with no op that reads one (python_reads, a tensor's address aside)."""
    from checker.trace.analyses.syncs import python_reads

    events = trace.events
    steps = trace.get_steps()
    if steps.empty:
        return 0
    rows = python_reads(events)
    # a tensor's address (data_ptr) hands over no value (native code that reads by it is judged by _inside_torch)
    rows = rows[~events["name"].iloc[rows].astype(str).str.contains(ADDRESS_CALL).to_numpy(dtype=bool)] \
        if len(rows) else rows
    if not len(rows):
        return 0
    start = events["start_ns"].to_numpy()[rows]
    inside = (start >= int(steps["start_ns"].min())) & (start <= int(steps["end_ns"].max()))
    step = events["step"].to_numpy(dtype=float, na_value=np.nan)[rows]
    logging = np.array([s == s and evidence.is_log_step(int(s)) for s in step], dtype=bool)
    return int((inside & ~logging).sum())


def _at_any_depth(baseline, candidate, threshold: float, measured: dict, decimals: int,
                  top_enough: bool = True) -> tuple[bool, ...]:
    """(whether the count at any depth is fewer by the threshold too, then the evidence's lines). Where the counts
    give none (a GPU's kernels are counted wherever they were launched from), (True,).

    Fewer ops at the top level can be ops moved inside one op (a hook or a dispatch mode that runs the same ops from
    inside it): the steps then make as many passes as before, deeper. Counted at any depth, each op that calls no
    other, the lesson's fix stays fewer by the bar and such a move does not (evidence/history/
    2026-12-03-cpu-session57-leaf-counts.md)."""
    mine, theirs = candidate.nested_per_step, baseline.nested_per_step
    if mine is None or theirs is None:
        return (True,)
    ratio = fewer_by(theirs, mine)
    measured.update(baseline_any_depth_per_step=round(theirs, 2), candidate_any_depth_per_step=round(mine, 2),
                    any_depth_fewer_by=round(ratio, 2) if ratio != float("inf") else None)
    enough = ratio >= threshold
    shown = "none left" if ratio == float("inf") else f"{ratio:.1f}x fewer"
    lines = [f"counted at any depth (each such op that calls no other): {mine:,.{decimals}f} per step vs the slow "
             f"script's {theirs:,.{decimals}f}: {shown} (threshold {threshold:g}x)"]
    if top_enough and not enough:
        lines.append("the ops gone from the top level still run inside other ops: the steps do as much as before, "
                     "one level down; fusing them (or a fused optimizer) removes them at every depth")
    return (enough, *lines)


def _in_time(evidence, at_most: float, measured: dict, lines: list[str]) -> bool:
    """On a CPU, whether the candidate's traced steps took at most ``at_most`` times the slow script's (the traced
    pair's windows on the grader's clock: the same steps, under the same profiler); on failure adds the line that
    says so. Elsewhere (a GPU grades the speed in its own check) or where the pair has no windows, True."""
    traced = evidence.traced
    if evidence.device != "cpu" or traced is None or traced[0] is None:
        return True
    mine, theirs = getattr(traced[1], "window_s", None), getattr(traced[0], "window_s", None)
    if not mine or not theirs:
        return True
    slower = mine / theirs
    measured.update(baseline_traced_window_s=round(theirs, 4), candidate_traced_window_s=round(mine, 4),
                    traced_slower_by=round(slower, 2))
    if slower <= at_most:
        return True
    lines.append(f"its traced steps took {mine * 1e3:,.1f} ms against the slow script's {theirs * 1e3:,.1f} ms: "
                 f"{slower:.2f}x its time (on a CPU at most {at_most:g}x). The count fell by working where no "
                 "operator is counted (arithmetic in Python on a tensor's values, say), not by fusing: fusion makes "
                 "the step faster")
    return False
