"""samples_in_workers: the loader's worker processes prepare the samples, not the training process.

A DataLoader can have live, persistent workers (loader_settings passes) that hand out only sample keys, the samples
then made in the training process, inside the step. Which code made them is no evidence (a script can copy the
dataset's code under any name); what it called is: preparing a sample cannot do without its primitives, named
per chapter in ``preparing_calls`` (a crop's pad and a flip as aten ops, a JPEG decoder's C call). The trace of the
training process is read for them (``TraceAnalysis.get_sample_preparations``); each grows to the frame that
made that one sample, and the check counts those frames per traced step against the
threshold: how many samples a step may still prepare in the training process. It comes after loader_settings:
without workers, the training process preparing every sample is that check's failure, not this one's.

A call the trace does not show still costs the training process its CPU time, which the grader reads from the kernel
over the window of every CPU run (``RunResult.window_cpu_ns``). Where a chapter gives ``training_cpu_share``, the
training process's CPU time per step, pooled over every pair the grader made, may be at most that share of the slow
script's, which prepares every sample in its own process: a sample decoded there by any road (a decoder called from
C, an op run below the profiler's hook) keeps the training process as busy as the slow script's.
"""

from __future__ import annotations

import re
from collections import Counter

from checker.checks import BASELINE_TRACE, FAILED, PASSED, TIMED_CPU, TRACE, check, result
from checker.checks.evidence import cpu_per_step, slow_cpu_pairs


@check("samples_in_workers", needs=(TRACE, BASELINE_TRACE, TIMED_CPU), after=("loader_settings",),
       key="samples_prepared_per_step", fmt="{:g} per step", data_wait_is_work=True)
def samples_in_workers(evidence, spec):
    """the training process prepares at most the threshold's samples per step: the loader's workers prepare them"""
    threshold = float(spec.threshold_for(evidence.device))
    calls = spec.options.get("preparing_calls")
    if not calls:
        raise ValueError(f"check {spec.name}: give it preparing_calls = '<regex>' in chapter.toml")
    trace = evidence.trace()
    # every traced step counts, logging steps too: a logging step may read values for its log, never make samples
    # (samples made there ahead of the next steps are still made in the training process)
    counted = len(trace.get_steps())
    if counted <= 0:
        return result(spec, FAILED, threshold=threshold, evidence=["the trace holds no training steps"])
    made = trace.get_sample_preparations(calls)
    samples = made.drop_duplicates(["step", "tid", "start_ns", "end_ns"])
    per_step = len(samples) / counted
    measured = {"samples_prepared_per_step": round(per_step, 2), "preparing_calls": len(made), "steps": counted}
    if samples.empty:
        lines = [f"no sample prepared in the training process's {counted} traced steps (no call that prepares one: "
                 "a decoder, a crop or a flip, as chapter.toml's preparing_calls names them)"]
    else:
        top = samples["frame"].value_counts()
        calls_seen = made["call"].str.replace(r" at 0x[0-9a-f]+", "", regex=True).value_counts()
        lines = [f"the training process prepared {per_step:.1f} samples per step itself ({len(samples)} in {counted} "
                 f"traced steps), threshold {threshold:g}: the loader's workers should prepare them",
                 "made by " + ", ".join(f"{name} ({n})" for name, n in top.head(3).items()),
                 "calling " + ", ".join(f"{name} ({n})" for name, n in calls_seen.head(4).items())]
    status = PASSED if per_step <= threshold else FAILED
    unfinished = _unfinished_batches(evidence, measured)
    if unfinished:
        lines.append(unfinished)
        status = FAILED
    fetched = _work_in_fetch(evidence, trace, measured)
    if fetched:
        lines.append(fetched)
        status = FAILED
    blocked = _blocked_outside_fetch(evidence, spec, measured)
    if blocked:
        lines.append(blocked)
        status = FAILED
    waited = _time_in_fetch(evidence, spec, measured)
    if waited:
        lines.append(waited)
        status = FAILED
    busy = _training_cpu(evidence, spec, measured)
    if busy:
        lines.append(busy)
        status = FAILED
    elif "training_cpu_share" in measured:
        lines.append(f"the training process's CPU time per window step: {measured['training_cpu_share']:.0%} of the "
                     f"slow script's over {measured['cpu_pairs']} pair(s) (allowed up to "
                     f"{float(spec.options['training_cpu_share']):.0%})")
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)


# What a fetch with workers runs in the training process: tensors rebuilt over the shared memory a worker filled
# (empty, set_, resize_) and the sampler's draws at an epoch's start (randperm, read with tolist). Any other op there
# computes in the training process while the batch arrives: a worker can hand back keys in an object whose unpickling
# runs a function (or a builtin such as torch.take) that crops and flips the batch inside the DataLoader's next(),
# before the finished-batch audit sees it (red team 33's unpickle_prep_07).
FETCH_OPS = re.compile(r"^aten::(?:empty|empty_strided|set_|resize_|randperm|scalar_tensor|resolve_conj|resolve_neg"
                       r"|_local_scalar_dense)$")


def _work_in_fetch(evidence, trace, measured: dict) -> str | None:
    """A failing line when ops other than FETCH_OPS ran inside the traced steps' fetches, else None. On a CPU: a GPU
    run's fetch (pinned memory, its own thread) has not been checked against the list, and its speed bar judges."""
    if evidence.device != "cpu":
        return None
    others: Counter = Counter()
    for ops in trace.get_fetch_ops().values():
        others.update({name: n for name, n in ops.items() if not FETCH_OPS.match(name)})
    measured["ops_in_fetch"] = sum(others.values())
    frames = trace.get_script_frames_in_fetches()
    measured["script_frames_in_fetch"] = sum(frames.values())
    if not others and not frames:
        return None
    shown = ", ".join(f"{name.rsplit('/', 1)[-1]} {n}" for name, n in (others + frames).most_common(4))
    what = " and ".join(part for part, n in ((f"{sum(others.values())} ops", others),
                                              (f"{sum(frames.values())} calls of its own code", frames)) if n)
    return (f"the training process computed inside its fetches of the traced steps' batches ({what}: {shown}): with "
            "workers, a batch arrives finished; only its tensors are rebuilt there, and no code of the script's runs")


def _unfinished_batches(evidence, measured: dict) -> str | None:
    """Why the batches the loader handed the window were not finished samples, or None, where the workload's
    settings ask the harness to compare some (``finished_batches``: checker.candidate.session.Finished). Samples
    finished in the step by ops no preparing_calls names (a pad by a slice copy, a flip by index_select) show here:
    the batch was raw images."""
    if not int(evidence.cfg.get("finished_batches", 0) or 0):
        return None
    # every candidate run's batches, not the traced run's alone: a script cannot tell which run would be compared,
    # but one that finished its samples in the step in some runs passed as often as the others were picked
    runs = [run for _, run in evidence.pairs if run is not None]  # (pairs_of: each run once)
    checked = unfinished = wanted = 0
    short = None
    for run in runs:
        if run.finished_batches is None:
            return ("the run did not say whether its loader's batches were finished samples (the harness compares a "
                    "few after the window): a run that ends its window normally always does")
        compared, bad = run.finished_batches
        # the count the grader's settings ask for: every window batch up to finished_batches (a run that compared
        # fewer changed what the harness compares: red team 67's rawflip_07 set finished_batches=1 through start())
        asked = min(int(evidence.cfg["finished_batches"]), max(int(run.steps) - int(evidence.cfg.get("warmup", 0)), 0))
        if compared < asked and short is None:
            short = (compared, asked)
        checked, unfinished, wanted = checked + compared, unfinished + bad, wanted + asked
    measured.update(batches_compared=checked, batches_unfinished=unfinished, batches_wanted=wanted,
                    runs_compared=len(runs))
    if not checked:
        return "no batch of the window could be compared with its samples: the loader gave the steps no batches"
    if short is not None:
        return (f"the harness compared {short[0]} window batches of a run with their samples, not the {short[1]} the "
                "grader's settings ask for: the run changed what is compared")
    if not unfinished:
        return None
    return (f"{unfinished} of the {checked} window batches compared (in {len(runs)} run{'s' if len(runs) > 1 else ''}) "
            "were not their samples as the dataset makes them (cropped, flipped and normalized, or the uint8 dataset's "
            "crops and flips, in the order of the workload's sampler): the loader handed the steps something to "
            "finish, and the training process finished the samples")


def _blocked_outside_fetch(evidence, spec, measured: dict) -> str | None:
    """Why the stepping thread's waits outside its fetches say the loading did not overlap the training, or None.

    Workers that load only when the step lets them (a gate the step opens after training and waits on before it
    ends) hand every fetch a batch already made, so the wait data_wait would see moves into the step, and the
    training process, blocked, uses no CPU. Training on a CPU waits for nothing outside the fetch: the thread that
    steps is on a CPU or waiting for one. So the time it spent blocked there, from the kernel's scheduler statistics
    (``RunResult.window_blocked_ns``), pooled over every candidate run, may be at most ``blocked_share`` of its time
    outside the fetches. A run that could not read them fails: the waits could not be seen."""
    share_max = spec.options.get("blocked_share")
    if share_max is None or evidence.device != "cpu":
        return None
    runs = [c for _, c in evidence.pairs if c is not None]
    unread = [run for run in runs if run.window_blocked_ns is None]
    if unread or not runs:
        return ("the stepping thread's blocked time could not be read (the kernel's scheduler statistics, "
                "/proc/thread-self/schedstat): whether its steps waited for the loader outside the fetch is unknown")
    blocked = sum(run.window_blocked_ns[0] for run in runs)
    outside = sum(run.window_blocked_ns[1] for run in runs)
    share = blocked / outside if outside > 0 else 0.0
    measured["blocked_outside_fetch"] = round(share, 3)
    if share <= float(share_max):
        return None
    return (f"the stepping thread was blocked for {share:.0%} of its steps' time outside the fetches ({blocked / 1e6:.0f} "
            f"of {outside / 1e6:.0f} ms over {len(runs)} run(s); allowed up to {float(share_max):.0%}): the step waited "
            "for its next batch after fetching this one, so the loading did not overlap the training")


def _training_cpu(evidence, spec, measured: dict) -> str | None:
    """Why the training process's CPU time says it prepared the samples itself, or None (see the module's
    docstring); the share goes into ``measured``.

    The share is pooled over every pair with the slow script on its baseline side (the timed pairs and the traced
    pair): a CPU time read once, over a few steps, moves with what else the machine runs, a process decoding JPEGs
    most. On a shared 2-core machine one pair's share of the solution ran from 0.594 to 0.749 and that of samples
    decoded out of the trace's sight from 0.707 to 1.314; three pairs pooled, 0.661 to 0.696 against 0.852 to 1.220
    (evidence/history/2026-12-02-cpu-session51-training-cpu-pairs-03.md). The chapter asks for two timed pairs on a
    CPU (``min_trials``) beside the traced one."""
    share_max = spec.options.get("training_cpu_share")
    if share_max is None or evidence.device != "cpu":
        return None
    pooled = slow_cpu_pairs(evidence)
    if not pooled:
        return None
    mine, theirs = cpu_per_step([c for _, c in pooled]), cpu_per_step([b for b, _ in pooled])
    if theirs <= 0:
        return None
    share = mine / theirs
    measured["training_cpu_share"] = round(share, 3)
    measured["cpu_pairs"] = pairs = len(pooled)
    if share <= float(share_max):
        return None
    return (f"the training process used {mine / 1e6:.1f} ms of CPU per window step, {share:.0%} of the slow script's "
            f"{theirs / 1e6:.1f} ms over {pairs} pair(s), which prepares every sample itself (allowed up to "
            f"{float(share_max):.0%}): the samples were made in it, by calls the trace does not show")


def _fetch_share(runs) -> tuple[float, int, int, int]:
    """(share of the window in the fetches, ns in them, ns blocked there, ns of window) over ``runs``."""
    blocked = sum(run.window_blocked_ns[2] for run in runs)
    fetching = sum(run.window_blocked_ns[3] for run in runs)
    window = sum(run.window_blocked_ns[1] + run.window_blocked_ns[3] for run in runs)
    return (fetching / window if window > 0 else 0.0), fetching, blocked, window


def _time_in_fetch(evidence, spec, measured: dict) -> str | None:
    """Why the time the stepping thread spent in its fetches says the loading did not overlap the training, or None.

    data_wait reads the waits from a trace and leaves out the steps that wait for a reason of their own (an epoch's
    first, a logging step's). Workers that load only while those fetches wait, one batch after another, hand every
    other step a batch already made, so data_wait sees almost no wait while the loading overlaps nothing. So the
    time inside every fetch of the window, an epoch's first and a logging step's included, on the harness's clock
    (blocked, spinning or waiting for a CPU alike), pooled over the pairs with the slow script beside it, may be at
    most ``fetch_share`` of the slow script's own share, which makes every batch in its fetch: loading that overlaps
    nothing takes as long as the slow script's, whatever the machine, while workers that load ahead wait only where
    an epoch starts. The part the thread spent blocked (the kernel's scheduler statistics) is reported beside it."""
    share_max = spec.options.get("fetch_share")
    if share_max is None or evidence.device != "cpu":
        return None
    pooled = [(b, c) for b, c in slow_cpu_pairs(evidence)
              if b.window_blocked_ns is not None and c.window_blocked_ns is not None]
    if not pooled:
        return None  # _blocked_outside_fetch says the statistics could not be read
    share, fetching, blocked, window = _fetch_share([c for _, c in pooled])
    theirs = _fetch_share([b for b, _ in pooled])[0]
    relative = share / theirs if theirs > 0 else 0.0
    measured.update(time_in_fetch=round(share, 3), blocked_in_fetch=round(blocked / window, 3) if window else 0.0,
                    slow_time_in_fetch=round(theirs, 3), time_in_fetch_vs_slow=round(relative, 3))
    if theirs <= 0 or relative <= float(share_max):
        return None
    return (f"the stepping thread spent {share:.0%} of the window in its fetches, {relative:.2f}x the slow script's "
            f"{theirs:.0%} ({fetching / 1e6:.0f} of {window / 1e6:.0f} ms over {len(pooled)} pair(s), blocked for "
            f"{blocked / 1e6:.0f} ms of it; every step counted, an epoch's first and a logging step's too; allowed up "
            f"to {float(share_max):.2f}x): the steps waited for batches made while they waited, so the loading did not "
            "overlap the training")
