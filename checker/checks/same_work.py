"""same_work: the candidate trained the same model on the same samples, as far as its weights can tell.

Nothing the script reports counts. Every run trains under a secret seed and window key (checker.base.workloads),
sends its trained weights to the grader, and the referee (checker.grader.referee), a fresh process that no
candidate code ran in, loads them strictly into a freshly built model and measures:

* how far they are from the weights of the baseline run trained under the same secret, relative to how far
  the baseline's training moved them (``weight_tolerance``: over all tensors; ``layer_tolerance``: any one
  layer that training moved). Fewer steps, part of each batch, or a layer left untrained land far away;
* integer buffers (BatchNorm's count of batches seen) equal to the baseline's;
* the held-out loss of the weights, within ``rel_tolerance`` of the baseline's (or ``abs_tolerance``);
* every window step trained: where the candidate's trace records its timed window (on a CPU the traced pair's
  window is the whole window; on a GPU where chapter.toml sets ``trace_window``), each traced step's work (GPU
  kernel time, or on a CPU the backward pass's node evaluations) must be at least
  ``STEP_WORK_FLOOR`` of the busy steps' (``STEP_WORK_REFERENCE``, a high quantile of the steps' work, so that steps
  that skip their training every other step cannot make the reference theirs): judged for every step, so a step that fetched its batch
  and trained on nothing fails however little the weights show it (bf16 and compile noise hid a quarter of the
  steps from the weight distance on an H100).

Every pair the check made is judged (timed and traced), so a run that skips work when it is not traced, or
when it is, fails either way.
"""

from __future__ import annotations

import math
import statistics

from checker.base.chapters import probe_updates
from checker.checks import FAILED, PASSED, VERDICTS, check, result


# Work moved before the timed window: the candidate's own code runs from the moment the harness says hello (its
# imports, set-up, the warm-up steps) until the window opens. Those seconds may exceed the baseline's by this
# factor plus these seconds, by device, unless chapter.toml says otherwise (untimed_factor, untimed_allowance_s):
# torch.compile and worker processes start there, honestly; a dataset decoded or a model trained there does not
# belong there. Set from the honest solutions' `before_window_s` (evidence/ keeps the runs).
BEFORE_WINDOW = ("build", "setup", "warm-up")
DEFAULT_UNTIMED = {"cpu": (2.0, 20.0), "cuda": (2.0, 20.0)}
# Work moved after the timed window: the script's own code after its loop (and session.finish()), from the moment the
# harness hands it back, the window's weights and trace sent. The CPU the run spent there (its processes', read by the
# grader; a CPU run only: on a GPU a run's CPU is not its work) may exceed the baseline's by this factor plus these
# seconds, unless chapter.toml says otherwise (after_factor, after_allowance_s). A final print or save belongs
# there; per-step work kept for later does not (red team 68's deferred_eval_09 evaluated every window step's weights
# after the loop, where no step's trace, wait or CPU reading looked: 0.30-0.38 s of CPU in chapter 09's check, where
# every reference solution's end took 0.042 s or less with its exit handlers;
# evidence/history/2026-12-07-cpu-session80-after-window*.txt).
DEFAULT_AFTER = (2.0, 0.1)

# How far honest weights land from the baseline's, by device, unless chapter.toml says otherwise. On a CPU the
# same ops in the same order give the same weights (0.0 for every reference solution); on a GPU, atomics in
# convolution and reduction kernels, TF32/bf16 and fused kernels make every run differ a little.
DEFAULT_WEIGHT_TOLERANCE = {"cpu": 0.1, "cuda": 0.3}


# The least share of the busy traced steps' work (below) that every traced window step must show. A step that trains
# (forward, backward, optimizer step on its batch) does about the same work as the next: on a CPU the same backward
# nodes every step (a forward alone runs none), on a GPU about the same kernel time (a forward alone about a third).
STEP_WORK_FLOOR = 0.5
# A baseline step's share is floored here before a candidate's step is held to it, so that a step the baseline ran
# almost nothing in cannot excuse any candidate step
BASELINE_SHARE_FLOOR = 0.1
# What a step's work is held against: the steps' work at this quantile. An honest window's steps do the same work
# (on a CPU the same backward nodes; on a GPU kernel time within a few percent), so any quantile is theirs. The median
# was not: a script that ran its forward alone every other step made the median half a step's, and its forward-only
# steps stood at 0.508 of it on an H200 (half_steps_07, evidence/history/2026-12-01-h200-session50-call1-checks.jsonl);
# against the busiest tenth they stand at about a third.
STEP_WORK_REFERENCE = 0.9

# How far the gradient a drawn window step applied may be from its whole batch's, by device (update_tolerance in
# chapter.toml): the same float32 ops give the same gradient, up to the rounding of recovering it from the weights
DEFAULT_UPDATE_TOLERANCE = {"cpu": 0.05, "cuda": 0.3}


def _tolerance(spec, name: str, device: str, default: float) -> float:
    return float(spec.option_for(name, device, default) if spec is not None else default)


def tolerances(spec, device: str) -> dict[str, float]:
    """The chapter's tolerances for same_work on this device, defaults filled in (all defaults: spec None)."""
    weight = _tolerance(spec, "weight_tolerance", device, DEFAULT_WEIGHT_TOLERANCE[device])
    return {"rel_tolerance": _tolerance(spec, "rel_tolerance", device, 0.05),
            "abs_tolerance": _tolerance(spec, "abs_tolerance", device, 0.0),
            "weight_tolerance": weight,
            "layer_tolerance": _tolerance(spec, "layer_tolerance", device, 2.5 * weight)}


def traced_limits(spec, device: str, limits: dict[str, float]) -> dict[str, float]:
    """The tolerances for the traced pair when it is a pair of its own: ``traced_weight_tolerance`` over all tensors
    where chapter.toml sets one for the device (one layer's tolerance stays the timed pairs'), else the timed pairs'.
    A traced pair trains only warm-up plus trace_steps steps, where float32's own spread has had less time to grow
    than a lower precision's systematic difference (chapter 01)."""
    weight = _tolerance(spec, "traced_weight_tolerance", device, float("nan"))
    if weight != weight:  # not set
        return limits
    return dict(limits, weight_tolerance=weight)


def _weight_problems(far: dict, limits: dict[str, float], reference: str) -> list[tuple[str, str]]:
    """(the measure that differs, its evidence line) for one candidate's weights against the reference's."""
    problems = []
    if not math.isfinite(far["relative"]) or far["relative"] > limits["weight_tolerance"]:
        problems.append(("weight_distance",
                         f"work differs: its weights are {far['relative']:.2f} of the {reference}'s training away "
                         f"from the {reference}'s, trained under the same secret "
                         f"(tolerance {limits['weight_tolerance']:g})"))
    elif not math.isfinite(far["worst_tensor"]) or far["worst_tensor"] > limits["layer_tolerance"]:
        problems.append(("worst_layer",
                         f"work differs: {far['worst_tensor_name']} is {far['worst_tensor']:.2f} of its training "
                         f"away from the {reference}'s (tolerance {limits['layer_tolerance']:g}): a layer trained "
                         "differently"))
    if far["counts_differ"]:
        problems.append(("batch_counts", f"work differs: {', '.join(far['counts_differ'][:3])} differ from the "
                                         f"{reference}'s (BatchNorm counts the batches it saw)"))
    return problems


def weight_differences(far: dict, limits: dict[str, float], reference: str = "baseline") -> list[str]:
    """Evidence lines for one candidate's weights against the reference's (the referee's ``distance``)."""
    return [line for _, line in _weight_problems(far, limits, reference)]


def loss_difference(base_loss: float, cand_loss: float, limits: dict[str, float],
                    reference: str = "baseline") -> tuple[float, str | None]:
    """(relative difference of the held-out losses, an evidence line when beyond both tolerances)."""
    relative = abs(cand_loss - base_loss) / abs(base_loss) if base_loss else float("inf")
    if not math.isfinite(cand_loss) or (relative > limits["rel_tolerance"]
                                        and abs(cand_loss - base_loss) > limits["abs_tolerance"]):
        return relative, (f"work differs: held-out loss {cand_loss:.4f} vs the {reference}'s {base_loss:.4f} "
                          f"({relative:.1%} apart; tolerance {limits['rel_tolerance']:.0%} or "
                          f"{limits['abs_tolerance']:g} absolute)")
    return relative, None


def pair_problems(judged: dict, limits: dict[str, float], reference: str) -> tuple[list[str], float]:
    """Everything that differs in one judged pair (the referee's {"baseline", "candidate"}), and the weight
    distance (NaN when either side did not load): the check of a reference solution against the slow script."""
    problems = [side["load_error"] for side in (judged["baseline"], judged["candidate"]) if "load_error" in side]
    if problems:
        return problems, float("nan")
    far = judged["candidate"]["distance"]
    problems = weight_differences(far, limits, reference)
    _, line = loss_difference(judged["baseline"]["eval_loss"], judged["candidate"]["eval_loss"], limits, reference)
    return problems + ([line] if line else []), far["relative"]


def failure_measure(measured: dict, threshold) -> str | None:
    """What decided a failed same_work, for its gradebook cell: the measure beyond its tolerance (``failed_on``),
    never the loss difference when the weights decided and the loss was within its tolerance."""
    threshold = threshold or {}
    failed_on = measured.get("failed_on")
    if failed_on == "weight_distance":
        return f"weight distance {measured['weight_distance']:.2f} > {threshold['weight_tolerance']:g}"
    if failed_on == "worst_layer":
        return f"one layer's distance {measured['worst_layer']:.2f} > {threshold['layer_tolerance']:g}"
    if failed_on == "relative_difference":
        return f"{measured['relative_difference']:.1%} loss diff > {threshold['rel_tolerance']:.0%}"
    if failed_on == "before_window":
        seconds = measured["before_window_s"]
        return f"{seconds['candidate']:.0f} s before the window > {seconds['allowed']:.0f} s"
    if failed_on == "after_window":
        seconds = measured.get("after_window_cpu_s")
        if seconds is None:
            return "the work after the window could not be measured"
        return f"{seconds['candidate']:.2f} s of CPU after the window > {seconds['allowed']:.2f} s"
    if failed_on == "updates":
        return "a drawn step's update is not one step on its whole batch"
    if failed_on == "steps_trained":
        return f"{measured['steps_trained'].get('idle', '?')} window step(s) trained on nothing"
    return {"batch_counts": "BatchNorm counts differ", "load": "weights do not fit the model",
            "samples": "samples in the window differ"}.get(failed_on)


def judge_pair(judged: dict, spec, device: str, reference: str) -> tuple[list[str], float]:
    """What differs in one judged pair under the chapter's tolerances for ``device``, and the weight distance."""
    return pair_problems(judged, tolerances(spec, device), reference)


@check("same_work", needs=(VERDICTS,), key="relative_difference", fmt="{:.1%} loss diff", thresholded=False,
       failure=failure_measure, pair_judge=judge_pair)
def same_work(evidence, spec):
    """trains the same model on the same samples and ends at the baseline's loss"""
    limits = tolerances(spec, evidence.device)
    short = traced_limits(spec, evidence.device, limits)
    reference = evidence.reference
    pairs = evidence.pairs
    timed = len(evidence.timed)
    verdicts = evidence.verdicts
    lines: list[str] = []
    failed_on: list[str] = []  # the measure behind each line of evidence, in the same order
    distances, worst_layers, base_losses, cand_losses = [], [], [], []
    for index, (baseline, candidate) in enumerate(pairs):
        judged = verdicts[index]
        if "load_error" in judged["baseline"]:
            raise RuntimeError(f"the {reference}'s weights did not load: {judged['baseline']['load_error']}")
        cand = judged["candidate"]
        if "load_error" in cand:
            lines.append(f"work differs: the weights it sent back do not fit the chapter's model "
                            f"({cand['load_error']})")
            failed_on.append("load")
            continue
        base_losses.append(judged["baseline"]["eval_loss"])
        cand_losses.append(cand["eval_loss"])
        far = cand["distance"]
        distances.append(far["relative"])
        worst_layers.append(far["worst_tensor"])
        # the traced pair (when it is a pair of its own: fewer steps than a timed pair) may have tolerances of its own
        for measure, line in _weight_problems(far, short if index >= timed else limits, reference):
            failed_on.append(measure)
            lines.append(line)
    measured: dict = {"pairs": len(pairs)}
    if base_losses:
        base_loss, cand_loss = statistics.median(base_losses), statistics.median(cand_losses)
        relative, line = loss_difference(base_loss, cand_loss, limits, reference)
        measured.update(
            baseline_eval_loss=round(base_loss, 5), candidate_eval_loss=round(cand_loss, 5),
            relative_difference=round(relative, 5), weight_distance=round(max(distances), 4),
            weight_distances=[round(d, 4) for d in distances], worst_layer=round(max(worst_layers), 4),
            baseline_eval_losses=[round(x, 5) for x in base_losses],  # per pair: how far runs of one script spread
            candidate_eval_losses=[round(x, 5) for x in cand_losses],
        )
        if reference != "baseline":
            measured["compared_with"] = reference
        if line:
            lines.append(line)
            failed_on.append("relative_difference")
    samples = {(b.samples, c.samples) for b, c in pairs}
    if any(b != c for b, c in samples):
        b, c = next(iter(samples))
        lines.append(f"work differs: the run reported {c} samples in the window, the {reference} {b}")
        failed_on.append("samples")
    moved = work_before_window(pairs, spec, evidence.device, reference)
    if moved is not None:
        measured["before_window_s"] = moved["seconds"]
        if moved["line"]:
            lines.append(moved["line"])
            failed_on.append("before_window")
    after = work_after_window(pairs, spec, evidence.device, reference)
    if after is not None:
        if after["seconds"] is not None:
            measured["after_window_cpu_s"] = after["seconds"]
        if after["line"]:
            lines.append(after["line"])
            failed_on.append("after_window")
    probed = updates_checked(evidence, spec)
    if probed is not None:
        measured["updates"] = probed["measured"]
        if probed["line"]:
            lines.append(probed["line"])
            failed_on.append("updates")
    counted = steps_trained(evidence)
    if counted is not None:
        measured["steps_trained"] = counted["measured"]
        if counted["line"]:
            lines.append(counted["line"])
            failed_on.append("steps_trained")
    threshold = {k: limits[k] for k in ("weight_tolerance", "layer_tolerance", "rel_tolerance")}
    if short is not limits and len(pairs) > timed:
        threshold["traced_weight_tolerance"] = short["weight_tolerance"]
    if not lines:
        lines.append(f"weights within {max(distances):.2f} of the {reference}'s training (tolerance "
                        f"{limits['weight_tolerance']:g}), held-out loss {measured['candidate_eval_loss']:.4f} vs "
                        f"{measured['baseline_eval_loss']:.4f}, over {len(pairs)} pair(s)")
        return result(spec, PASSED, measured=measured, threshold=threshold, evidence=lines)
    measured["failed_on"] = failed_on[0]
    return result(spec, FAILED, measured=measured, threshold=threshold, evidence=lines)


def before_window_s(run) -> float | None:
    """Seconds from the harness's hello to the window's opening, on the grader's clock (None: not stamped)."""
    phases = getattr(run, "phases_s", None) or {}
    if not all(name in phases for name in BEFORE_WINDOW):
        return None
    return sum(phases[name] for name in BEFORE_WINDOW)


def _beyond_baseline(pairs, measure, factor: float, allowance: float, digits: int) -> tuple[dict, bool] | None:
    """The candidate's worst ``measure`` (of a run) over the pairs against the baseline's median, allowed ``factor``
    times it plus ``allowance``: (seconds shown, whether beyond), or None where no pair has both measured."""
    spans = [(measure(b), measure(c)) for b, c in pairs]
    spans = [(b, c) for b, c in spans if b is not None and c is not None]
    if not spans:
        return None
    base = statistics.median(b for b, _ in spans)
    worst = max(c for _, c in spans)
    allowed = factor * base + allowance
    return ({"candidate": round(worst, digits), "baseline": round(base, digits), "allowed": round(allowed, digits)},
            worst > allowed)


def work_before_window(pairs, spec, device: str, reference: str) -> dict | None:
    """The candidate's seconds before the window against the baseline's in the same pairs, and a line when they
    exceed what honest set-up and warm-up take (None when the runs carry no stamps)."""
    factor, allowance = DEFAULT_UNTIMED.get(device, (2.0, 20.0))
    factor = _tolerance(spec, "untimed_factor", device, factor)
    allowance = _tolerance(spec, "untimed_allowance_s", device, allowance)
    found = _beyond_baseline(pairs, before_window_s, factor, allowance, 2)
    if found is None:
        return None
    seconds, beyond = found
    worst, base = seconds["candidate"], seconds["baseline"]
    line = None
    if beyond:
        line = (f"work moved before the timed window: its set-up and warm-up took {worst:.1f} s, "
                f"{worst / max(base, 1e-9):.1f}x the {reference}'s {base:.1f} s (allowed: {factor:g}x + {allowance:g} s): "
                "work done before the timed window is not allowed")
    return {"seconds": seconds, "line": line}


def after_window_cpu_s(run) -> float | None:
    """CPU seconds the run's processes spent after the harness handed the script back its code (every rank's, for a
    job of several: the busiest); None where not read."""
    spent = [max(sum(r.after_cpu_ns), 0) / 1e9 for r in (getattr(run, "ranks", None) or [run])
             if getattr(r, "after_cpu_ns", None) is not None]
    return max(spent) if spent else None


def work_after_window(pairs, spec, device: str, reference: str) -> dict | None:
    """The candidate's CPU after the window against the baseline's in the same pairs, and a line when it exceeds
    what an honest script's end takes (None where no run's was read: a GPU run)."""
    if device != "cpu":
        return None
    factor = _tolerance(spec, "after_factor", device, DEFAULT_AFTER[0])
    allowance = _tolerance(spec, "after_allowance_s", device, DEFAULT_AFTER[1])
    unread = sum(1 for b, c in pairs if after_window_cpu_s(b) is not None and after_window_cpu_s(c) is None)
    if unread:  # every CPU run that sent its weights says when it has the script's code back; one that did not is
        # one whose end was not measured, not one with nothing there
        return {"seconds": None, "line": f"{unread} of the runs never said when the window was over (the harness's "
                                         "hand-back after its trace): the work after the window could not be measured"}
    found = _beyond_baseline(pairs, after_window_cpu_s, factor, allowance, 3)
    if found is None:
        return None
    seconds, beyond = found
    line = None
    if beyond:
        line = (f"work moved after the timed window: the script's code after its loop used {seconds['candidate']:.2f} "
                f"s of CPU, against the {reference}'s {seconds['baseline']:.2f} s (allowed: {factor:g}x + "
                f"{allowance:g} s): a step's work kept for after the window (an evaluation, a metric) is still the "
                "step's")
    return {"seconds": seconds, "line": line}


def updates_checked(evidence, spec) -> dict | None:
    """The updates of the window steps the grader drew in each candidate run (``probe_updates`` of the workload's
    settings; checker.grader.referee.update_errors), each against one optimizer step on its whole batch, within
    ``update_tolerance``. None where the chapter draws none on this device. The baseline's are shown beside them:
    how far an honest step of the slow script lands."""
    wanted = probe_updates(evidence.cfg or {})
    if not wanted or not evidence.verdicts:
        return None
    tolerance = _tolerance(spec, "update_tolerance", evidence.device, DEFAULT_UPDATE_TOLERANCE[evidence.device])
    worst: list[tuple[float, int]] = []
    shown: list[dict] = []  # each drawn step, kept in the results so that a tolerance can be set from them
    baseline_worst: list[float] = []
    line = None
    for index in sorted(evidence.verdicts):
        judged = evidence.verdicts[index]
        base = (judged.get("baseline") or {}).get("updates") or {}
        if base.get("worst") is not None:
            baseline_worst.append(base["worst"])
        cand = judged.get("candidate") or {}
        if "load_error" in cand:
            continue  # its weights already fail
        updates = cand.get("updates")
        if updates is None:
            line = line or ("work differs: the run did not send the tensors of the window steps the grader drew, so "
                            "the updates those steps made could not be checked")
            continue
        if "error" in updates:
            line = line or f"work differs: the updates of its window steps could not be checked: {updates['error']}"
            continue
        worst.extend((float(found["relative"]), int(found["step"])) for found in updates.get("steps", []))
        shown.extend(updates.get("steps", []))
    far = [(r, step) for r, step in worst if not r <= tolerance]  # NaN too
    if far and line is None:
        r, step = max(far, key=lambda f: (math.isnan(f[0]), f[0]))
        line = (f"work differs: window step {step}'s update is not one optimizer step on its whole batch: the "
                f"gradient it applied is {r:.2f} of the batch's own gradient away from it (tolerance {tolerance:g}; "
                f"{len(far)} of {len(worst)} drawn step(s) over): every window step must train on its whole batch")
    measured = {"drawn": len(worst), "worst": round(max(r for r, _ in worst), 4) if worst else None,
                "tolerance": tolerance,
                "baseline_worst": round(max(baseline_worst), 4) if baseline_worst else None, "steps": shown}
    return {"measured": measured, "line": line}


def steps_trained(evidence) -> dict | None:
    """Every window step the candidate's trace records, judged one by one: its work against the busy steps'
    (the ``STEP_WORK_REFERENCE`` quantile of the steps' work).
    None when the candidate has no trace; a note (and no line) when its trace records no step of its timed window
    (a traced tail after it); a failing line when the trace is not believed, since the steps could not be counted."""
    found = evidence.traces.get("candidate")
    if found is None:
        return None
    run = evidence.candidate_run
    if isinstance(found, Exception):
        return {"measured": {"counted": False},
                "line": f"the steps that trained could not be counted: {found}"}
    first = getattr(run, "trace_first_step", None)
    window_end = getattr(run, "steps", None)
    if first is None or window_end is None or first >= window_end:
        return {"measured": {"counted": False, "why": "the trace records steps after the timed window (traced tail)"},
                "line": None}
    work = found.get_step_work()
    work = work[work["step"] < window_end]
    if work.empty:
        return {"measured": {"counted": False}, "line": "the steps that trained could not be counted: the trace "
                                                        "holds no step of the timed window"}
    middle = float(work["work"].quantile(STEP_WORK_REFERENCE))
    if middle <= 0:
        return {"measured": {"counted": False, "why": "the trace shows no backward pass in most window steps"},
                "line": "work differs: even the busiest window steps show no backward pass in the trace: the steps did not train"}
    share = work["work"] / middle
    # where the slow script's trace holds the same steps, each step is held to its own share there: a chapter's
    # steps may differ by design (chapter 00's long batch every fourth step: its short steps run a quarter of a long
    # one's kernel time in both scripts), and a step that skipped its training is far under its share either way
    expected = _baseline_shares(evidence, work["step"], window_end)
    if expected is not None:
        share = share / expected
    work = work.assign(share=share)
    idle = work[work["share"] < STEP_WORK_FLOOR]
    measured = {"counted": True, "steps": int(len(work)), "least_share": round(float(share.min()), 3),
                "idle": int(len(idle)), "floor": STEP_WORK_FLOOR, "against": "slow script's same step"
                if expected is not None else "the busy steps"}
    line = None
    if len(idle):
        shown = ", ".join(f"{int(r.step)} ({r.share:.0%})" for r in idle.itertuples())
        than = ("its share of the run's work in the slow script's same step" if expected is not None
                else "the busy steps' work")
        line = (f"work differs: {len(idle)} of {len(work)} window steps did less than {STEP_WORK_FLOOR:.0%} of "
                f"{than} (step {shown}): every window step must train on its batch (forward, backward, "
                "optimizer step)")
    # on a CPU trace a step's work is a count of backward nodes, which a step of a model's own can be measured
    # against: every trainable tensor of the chapter's model gets its gradient in the traced process in every step
    # (a step run elsewhere, a decoy backward left here, stores gradients into none of them)
    parameters = _parameters(evidence)
    if parameters and not found.has_cuda and line is None:
        few = work[work["leaves"] < parameters]
        measured.update(parameters=parameters, least_gradients_stored=int(work["leaves"].min()))
        if len(few):
            shown = ", ".join(f"{int(r.step)} ({int(r.leaves)})" for r in few.head(6).itertuples())
            line = (f"work differs: in {len(few)} of {len(work)} window steps the traced process stored gradients into "
                    f"fewer than the model's {parameters} trainable tensors (step {shown}): every window step must "
                    "run the model's backward here, in the script's own process")
    return {"measured": measured, "line": line}


def _baseline_shares(evidence, steps, window_end: int):
    """Each of ``steps``' share of the busy steps' work in the baseline's trace of the same pair (a Series aligned with
    ``steps``), between BASELINE_SHARE_FLOOR and 1; None where that trace is missing, unread, or lacks any of the steps."""
    found = evidence.traces.get("baseline")
    if found is None or isinstance(found, Exception):
        return None
    base = found.get_step_work()
    base = base[base["step"] < window_end].groupby("step")["work"].sum()  # one row per step, whatever the ranges
    if base.empty or not set(steps).issubset(base.index):
        return None
    middle = float(base.quantile(STEP_WORK_REFERENCE))
    if middle <= 0:
        return None
    # at most 1: a step heavier than the busy ones in the baseline (an epoch's first, say) asks no more of the
    # candidate than the rule without a baseline does, so this rule is never the stricter one
    shares = (base / middle).clip(lower=BASELINE_SHARE_FLOOR, upper=1.0)
    return shares.reindex(steps.to_numpy()).set_axis(steps.index)


def _parameters(evidence) -> int | None:
    """The chapter's model's trainable tensors, as the referee built it for the traced pair's candidate."""
    traced = getattr(evidence, "traced", None)
    if traced is None or not evidence.verdicts:
        return None
    index = next((i for i, pair in enumerate(evidence.pairs) if pair is traced), None)
    judged = evidence.verdicts.get(index) if index is not None else None
    count = ((judged or {}).get("candidate") or {}).get("parameters")
    return int(count) if isinstance(count, int) and count > 0 else None
