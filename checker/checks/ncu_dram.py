"""ncu_dram: the hottest elementwise kernel, profiled with Nsight Compute, streams memory at a stated fraction
of the bandwidth this GPU can reach.

It runs only with `workbook check 05 --with-ncu`, on CUDA, with ncu found (WORKBOOK_NCU, else PATH); anywhere
else it is skipped with the reason. What it does:

1. The candidate's trace (the one the other checks read) names its hottest elementwise-family kernel: the
   one with the most GPU time per step (after compile, a fused triton_poi_/triton_per_ kernel) among those
   launched from the thread that holds the `step N` ranges. NVTX ranges are per thread, and PyTorch launches
   the backward kernels from autograd's own thread, so ncu's NVTX filter never sees those; a hotter kernel
   launched only from there is skipped, and the evidence says so.
2. ncu profiles one launch of that kernel inside one steady-state step, around the same launcher the checker
   uses for timing. The -k filter names the kernel's function and, for a templated PyTorch kernel, the functor
   that tells it apart (`vectorized_elementwise_kernel<.*MulFunctor`), since ncu spells template arguments
   differently from the trace::

       ncu --nvtx --nvtx-include "step N/" --kernel-name-base demangled -k "regex:<kernel filter>" -c 1
           --section SpeedOfLight --section MemoryWorkloadAnalysis --metrics <dram bytes, duration>
           --clock-control none -o <report> python -m checker.launch --script <candidate> ... -- --steps N+2 --warmup N

   and `ncu --import <report> --csv --page raw --print-units base` turns the report into one CSV row per
   profiled kernel (header: identity columns then one column per metric; second row: units).
3. A copy probe (`dst.copy_(src)` over 1 GiB, timed with CUDA events, in its own process) measures the bytes
   per second this GPU's memory actually streams. The kernel's DRAM bytes per second over that is the
   measure: near 1.0, the kernel is at the bandwidth floor, and only fewer bytes (fusion, bf16) make it faster.

The grader runs ncu and the probe (checker.grader.ncu); this check reads what they measured.\nSet WORKBOOK_NCU_OUT=<folder> to keep the .ncu-rep report and its CSV there (the docs' ncu excerpt comes from it).
"""

from __future__ import annotations

import csv
import io
import json
import re

import pandas as pd

from checker.checks import FAILED, NCU, PASSED, SKIPPED, TRACE, check, result
from checker.checks.evidence import NcuTarget
from checker.trace.analyses.counts import short_kernel_name

DRAM_PCT = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
SM_PCT = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
MEMORY_PCT = "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed"
DURATION = "gpu__time_duration.sum"
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
DRAM_RATE = "dram__bytes.sum.per_second"
EXTRA_METRICS = (DURATION, DRAM_READ, DRAM_WRITE, DRAM_RATE)
IDENTITY_COLUMNS = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream",
                    "Block Size", "Grid Size", "Device", "CC")

_PREFIX = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15,
           "Ki": 2.0**10, "Mi": 2.0**20, "Gi": 2.0**30, "Ti": 2.0**40}
_TIME = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
         "second": 1.0, "s": 1.0}


# -- parsing ncu's raw CSV page ---------------------------------------------------------------------------
def parse_number(text: str) -> float | None:
    """'1,234.5' -> 1234.5; 'n/a' or '' -> None (ncu writes thousands separators in its CSV)."""
    text = (text or "").strip().replace(",", "")
    try:
        return float(text)
    except ValueError:
        return None


def to_base_units(value: float | None, unit: str) -> float | None:
    """Bytes, bytes per second and seconds from ncu's units ('Mbyte', 'Gbyte/second', 'usecond', '%', ...)."""
    if value is None:
        return None
    unit = (unit or "").strip()
    if unit in _TIME:
        return value * _TIME[unit]
    match = re.fullmatch(r"(Ki|Mi|Gi|Ti|K|M|G|T|P)?(?:byte|B)(?:/(second|s))?", unit)
    if match:
        return value * _PREFIX[match.group(1) or ""]
    return value  # %, counts, cycles: as printed


def parse_ncu_raw_csv(text: str) -> list[dict]:
    """Rows of `ncu --import R --csv --page raw`: [{"id", "kernel", "grid", "block", "metrics": {name: value}}].

    Values are converted to base units (bytes, bytes/s, seconds) using the units row under the header; lines
    ncu prints around the table (==PROF==, ==WARNING==) are ignored.
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        raise ValueError("no ncu CSV table in the output (no header line starting with \"ID\")")
    reader = csv.reader(io.StringIO("\n".join(line for line in lines[start:] if line.startswith('"'))))
    header = next(reader)
    rows = list(reader)
    units: dict[str, str] = {}
    if rows and not (rows[0][0] or "").strip():  # the units row: its ID cell is empty
        units = dict(zip(header, rows[0]))
        rows = rows[1:]
    parsed = []
    for row in rows:
        cells = dict(zip(header, row))
        metrics = {name: to_base_units(parse_number(value), units.get(name, ""))
                   for name, value in cells.items() if name not in IDENTITY_COLUMNS}
        parsed.append({
            "id": cells.get("ID"), "kernel": cells.get("Kernel Name", ""), "grid": cells.get("Grid Size"),
            "block": cells.get("Block Size"), "metrics": metrics,
        })
    return parsed


def summarize_kernel(row: dict) -> dict:
    """What the check reports about one profiled kernel, from its parsed metrics."""
    metrics = row["metrics"]
    duration_s = metrics.get(DURATION)
    read, write = metrics.get(DRAM_READ), metrics.get(DRAM_WRITE)
    dram_bytes = (read or 0.0) + (write or 0.0) if read is not None or write is not None else None
    rate = metrics.get(DRAM_RATE)
    if rate is None and dram_bytes is not None and duration_s:
        rate = dram_bytes / duration_s
    return {
        "kernel": row["kernel"],
        "grid": row.get("grid"),
        "block": row.get("block"),
        "duration_us": round(duration_s * 1e6, 2) if duration_s else None,
        "dram_bytes": int(dram_bytes) if dram_bytes is not None else None,
        "dram_gbytes_per_s": round(rate / 1e9, 1) if rate else None,
        "dram_throughput_pct_of_peak": metrics.get(DRAM_PCT),
        "memory_throughput_pct_of_peak": metrics.get(MEMORY_PCT),
        "sm_throughput_pct_of_peak": metrics.get(SM_PCT),
    }


_EDGE = "[^0-9A-Za-z_]"  # a character that cannot be part of a C++ identifier


def kernel_regex(name: str) -> str:
    """An ncu -k filter for one kernel of the trace, by its function name, not matching longer names."""
    name = str(name).replace("void ", "", 1).replace("(anonymous namespace)::", "")
    head = re.split(r"[<(]", name, maxsplit=1)[0]
    base = head.rsplit("::", 1)[-1].strip()
    return f"regex:{re.escape(base)}({_EDGE}|$)"


def kernel_filter(name: str) -> str:
    """The ncu -k filter for one kernel of the trace, as the check uses it.

    A templated PyTorch kernel is many kernels under one function name (vectorized_elementwise_kernel runs
    every pointwise op), so the filter also asks for the functor or lambda that names its op, the one in its
    short name ('vectorized_elementwise_kernel<MulFunctor>'). ncu writes the template arguments differently
    from the trace ('(int)4' for '4', 'array<char *, 3>' for 'std::array<char*, 3ul>', with or without
    namespaces), so only the two identifiers are matched, each bounded by non-identifier characters. Any other
    kernel, such as a Triton kernel, is matched by its function name as in kernel_regex.
    """
    match = re.fullmatch(r"(\w+)<(\w+)>", short_kernel_name(name))
    if match is None:
        return kernel_regex(name)
    base, functor = match.groups()
    return f"regex:(^|{_EDGE}){base}<.*{_EDGE}{functor}({_EDGE}|$)"


def pick_kernel(hot):
    """The kernel to profile from hottest_kernels' table: (its row or None, the rule applied, the hotter
    kernels skipped because they were launched from another thread)."""
    known = hot["step_thread_calls_per_step"].notna()
    if hot.empty or not known.any():
        rule = "any thread (the trace does not link kernels to the threads that launched them)"
        return (hot.iloc[0] if not hot.empty else None), rule, hot.iloc[:0]
    rule = "launched from the thread holding the step ranges (ncu's NVTX filter sees only that thread)"
    seen = hot["step_thread_calls_per_step"] > 0
    if not seen.any():
        return None, rule, hot
    first = int(seen.to_numpy().argmax())
    return hot.iloc[first], rule, hot.iloc[:first]


def ncu_target(trace, spec, cfg) -> NcuTarget:
    """What to profile: the hottest elementwise kernel that ncu's NVTX filter can see, in one steady step."""
    hot = trace.get_hottest_kernels(limit=None)
    step = int(spec.options.get("ncu_step", cfg["warmup"]))
    sections = tuple(spec.options.get("section", ["SpeedOfLight", "MemoryWorkloadAnalysis"]))
    if hot.empty:
        return NcuTarget("", step, sections, problem="the candidate's trace holds no elementwise kernels to profile")
    target, thread_rule, skipped = pick_kernel(hot)
    details = {"thread_rule": thread_rule, "skipped_hotter_kernels": list(skipped["short"])}
    passed_over = None
    if not skipped.empty:
        first = skipped.iloc[0]
        passed_over = (f"skipped {first['short']} ({first['ms_per_step']:.2f} ms per step, the hottest elementwise "
                       "kernel): it is launched from autograd's backward thread, and ncu's NVTX filter cannot see "
                       "kernels launched from autograd's thread")
    if target is None:
        return NcuTarget("", step, sections, details=details, skipped=passed_over, problem=(
            f"none of the {len(hot)} elementwise kernels in the trace's steps is launched from the thread holding "
            f"the step ranges, so ncu's NVTX filter (step {step}/) would see none of them: nothing to profile"))
    details.update(
        hot_kernel_ms_per_step=round(float(target["ms_per_step"]), 3),
        hot_kernel_calls_per_step=round(float(target["calls_per_step"]), 2),
        hot_kernel_step_thread_calls_per_step=(None if pd.isna(target["step_thread_calls_per_step"])
                                               else round(float(target["step_thread_calls_per_step"]), 2)))
    return NcuTarget(kernel_filter(target["name"]), step, sections, EXTRA_METRICS, shown=str(target["short"]),
                     details=details, skipped=passed_over)


@check("ncu_dram", needs=(TRACE, NCU), key="fraction_of_copy", fmt="{:.0%} of copy bandwidth", ncu_target=ncu_target)
def ncu_dram(evidence, spec):
    """the hottest elementwise kernel streams memory at the threshold's share of this GPU's copy bandwidth"""
    if evidence.device != "cuda":
        return result(spec, SKIPPED, reason=f"Nsight Compute profiles CUDA kernels; this run is on {evidence.device}")
    threshold = float(spec.threshold_for(evidence.device))
    evidence.trace()  # a trace that is not the graded run's fails here, before anything is read of it
    outcome = evidence.ncu.get(spec.name)
    if outcome is None:
        return result(spec, SKIPPED, threshold=threshold,
                      reason=f"runs only when asked: workbook check {evidence.chapter.number:02d} --with-ncu (ncu "
                             "replays the kernel many times; a minute or two)")
    target = outcome.target
    details = dict(target.details)
    skipped_line = [target.skipped] if target.skipped else []
    picked = {k: details[k] for k in ("thread_rule", "skipped_hotter_kernels") if k in details}
    if target.problem:
        return result(spec, FAILED, threshold=threshold, measured=picked, evidence=[target.problem])
    if outcome.skip:
        return result(spec, SKIPPED, threshold=threshold, reason=outcome.skip)
    if outcome.failure:
        return result(spec, FAILED, threshold=threshold, measured=picked,
                      evidence=[outcome.failure, f"command: {outcome.command}", *skipped_line])
    try:
        rows = parse_ncu_raw_csv(outcome.csv)
    except ValueError as err:
        return result(spec, FAILED, threshold=threshold, evidence=[f"ncu --import: {err}", f"command: {outcome.command}"])
    if not rows:
        return result(spec, FAILED, threshold=threshold, measured=picked,
                      evidence=[f"ncu profiled no kernel matching {target.shown} in step {target.step}",
                                f"command: {outcome.command}", *skipped_line])
    kernel = summarize_kernel(rows[0])
    copy_rate = outcome.copy_bytes_per_s
    rate = kernel["dram_gbytes_per_s"]
    fraction = rate * 1e9 / copy_rate if rate and copy_rate else None
    measured = {
        **kernel,
        "kernel_short": target.shown,
        **details,
        "copy_gbytes_per_s": round(copy_rate / 1e9, 1) if copy_rate else None,
        "fraction_of_copy": round(fraction, 3) if fraction is not None else None,
        "ncu_step": target.step,
    }
    bound = ""
    dram_pct, sm_pct = kernel["dram_throughput_pct_of_peak"], kernel["sm_throughput_pct_of_peak"]
    if dram_pct is not None and sm_pct is not None:
        bound = "memory-bound" if dram_pct > sm_pct else "compute-bound"
        bound = f"; ncu: DRAM {dram_pct:.0f}% of peak, compute (SM) {sm_pct:.0f}%: {bound}"
    if fraction is None:
        return result(spec, FAILED, measured=measured, threshold=threshold,
                      evidence=[f"ncu reported no DRAM bytes or duration for {target.shown}", json.dumps(kernel)])
    which = "the hottest elementwise kernel" + (" that ncu can see" if skipped_line else "")
    evidence_lines = [
        (f"{target.shown} ({measured['hot_kernel_ms_per_step']:.2f} ms per step, {which}): "
         f"{rate:,.0f} GB/s from DRAM = {fraction:.0%} of the measured copy bandwidth ({copy_rate / 1e9:,.0f} GB/s), "
         f"threshold {threshold:.0%}{bound}"),
        *skipped_line,
    ]
    status = PASSED if fraction >= threshold else FAILED
    return result(spec, status, measured=measured, threshold=threshold, evidence=evidence_lines)
