"""samples_in_workers: the loader's worker processes prepare the samples, not the training process.

A DataLoader can have live, persistent workers (loader_settings passes) that hand out only sample keys, the samples
then made in the training process, inside the step. Which code made them is no evidence (a script can copy the
dataset's code under any name); what it called is: preparing a sample cannot do without its primitives, named
per chapter in ``preparing_calls`` (a crop's pad and a flip as aten ops, a JPEG decoder's C call). The trace of the
training process is read for them (``TraceAnalysis.get_sample_preparations``); each grows to the frame that
made that one sample, and the check counts those frames per traced step against the
threshold: how many samples a step may still prepare in the training process. It comes after loader_settings:
without workers, the training process preparing every sample is that check's failure, not this one's.
"""

from __future__ import annotations

from checker.checks import FAILED, PASSED, TRACE, check, result


@check("samples_in_workers", needs=(TRACE,), after=("loader_settings",), key="samples_prepared_per_step",
       fmt="{:g} per step", data_wait_is_work=True)
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
    return result(spec, status, measured=measured, threshold=threshold, evidence=lines)
