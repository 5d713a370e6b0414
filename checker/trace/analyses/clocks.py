"""The script's own clock reads, as a trace recorded ``with_stack=True`` holds them: what a benchmark measured.

Python's tracer names every call of a host clock (``<built-in function perf_counter>``; timeit's default_timer is
the same function), with the moment it was made. A benchmark that times its steps reads a clock in each of them, and
the times it reports are differences of those reads; the trace therefore says what the report should be, step by
step, without trusting the report. The harness's own reads (its step stamps) are told apart by the Python frame that
made them (checker/).

    reads = clock_reads(events)                  # DataFrame: step, start_ns of each of the script's reads
    per_step = clock_step_ms(reads, steps)       # {step: ms} as those reads measured each step
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

from checker.trace.analyses.stack import FRAME
from checker.trace.intervals import innermost

CLOCK_READ = re.compile(r"^<built-in function (?:perf_counter|perf_counter_ns|monotonic|monotonic_ns|time|time_ns)>$"
                        r"|^<built-in method (?:now|utcnow) of type object at 0x[0-9a-fA-F]+>$")
# the workbook's own code: its harness stamps each step with perf_counter_ns
HARNESS_FRAME = re.compile(r"(?:^|/)checker/")


def clock_reads(events: pd.DataFrame, threads=None) -> pd.DataFrame:
    """The script's host clock reads in the traced steps: ``step`` and ``start_ns``, in time order (reads that the
    workbook's own frames made are left out). With ``threads`` ((pid, tid) pairs: those that ran the steps), only
    reads those threads made: a thread of the script's own reads the clock whenever the script tells it to, so its
    reads time nothing the steps did (red team 25 placed them from a model of the steps)."""
    python = events[events["kind"] == "python"]
    if threads is not None:
        wanted = pd.MultiIndex.from_tuples([(int(pid), int(tid)) for pid, tid in threads])
        python = python[pd.MultiIndex.from_arrays([python["pid"].astype("int64"), python["tid"].astype("int64")])
                        .isin(wanted)]
    names = python["name"].astype(str)
    reads = python[names.str.match(CLOCK_READ).to_numpy(bool) & python["step"].notna().to_numpy(bool)]
    if reads.empty:
        return pd.DataFrame({"step": pd.Series(dtype="Int64"), "start_ns": pd.Series(dtype="int64")})
    frames = python[names.str.match(FRAME).to_numpy(bool)]
    keep = []
    for (pid, tid), mine in reads.groupby(["pid", "tid"]):
        pool = frames[(frames["pid"] == pid) & (frames["tid"] == tid)].sort_values(["start_ns", "end_ns"],
                                                                                   ascending=[True, False])
        holder = innermost(mine["start_ns"].to_numpy(np.int64), pool["start_ns"].to_numpy(np.int64),
                           pool["end_ns"].to_numpy(np.int64))
        held_by = np.array([str(pool["name"].iat[h]) if h >= 0 else "" for h in holder], dtype=object)
        keep += list(mine.index[[not HARNESS_FRAME.search(name) for name in held_by]])
    found = reads.loc[keep].sort_values("start_ns")
    return pd.DataFrame({"step": found["step"].astype("Int64").to_numpy(), "start_ns": found["start_ns"].to_numpy()})


def clock_step_ms(reads: pd.DataFrame, steps) -> dict[int, float | None]:
    """Each of ``steps`` as the script's reads measured it (ms): from its first read to its last where it made
    two or more (a clock started and stopped around the step), from the read before it to its one read where it
    made one (a clock read once per step), None where it made none (or one, the first read of all)."""
    out: dict[int, float | None] = {}
    times = reads["start_ns"].to_numpy(np.int64)
    by_step = reads["step"].to_numpy()
    for step in steps:
        mine = np.flatnonzero(by_step == step)
        if len(mine) >= 2:
            out[int(step)] = float(times[mine[-1]] - times[mine[0]]) / 1e6
        elif len(mine) == 1 and mine[0] > 0:
            out[int(step)] = float(times[mine[0]] - times[mine[0] - 1]) / 1e6
        else:
            out[int(step)] = None
    return out
