"""Chapter 00's idle shares from kept traces (`workbook check 00 --keep-traces DIR`): for each DIR, the candidate's
and the slow script's mean share of a step that ran no op on its thread (the CPU rule) and, where the trace holds GPU
work, the mean share of each step's device time the device ran nothing (the GPU rule step_cost would use).

    python evidence/probes/idle_share_probe.py DIR [DIR ...]
"""

import glob
import json
import sys

import numpy as np
import pandas as pd

from checker.checks.step_report import DEVICE_KINDS
from checker.trace import load
from checker.trace.analyses.ops import uncovered_shares
from checker.trace.intervals import clip, union_length


def device_idle_shares(events) -> pd.Series:
    """Each traced step's share of its device time (from its first GPU work to the next step's) the device ran
    nothing; the last step is left out."""
    work = events[events["kind"].isin(DEVICE_KINDS) & events["step"].notna()]
    if work.empty:
        return pd.Series(dtype=float)
    firsts = work.groupby("step")["start_ns"].min().sort_index()
    starts, ends = work["start_ns"].to_numpy(np.int64), work["end_ns"].to_numpy(np.int64)
    shares = {}
    for step, lo, hi in zip(firsts.index[:-1], firsts.to_numpy()[:-1], firsts.to_numpy()[1:]):
        if hi > lo:
            shares[int(step)] = 1.0 - union_length(*clip(starts, ends, int(lo), int(hi))) / (hi - lo)
    return pd.Series(shares, dtype=float)

for folder in sys.argv[1:]:
    for role in ("candidate", "baseline"):
        found = glob.glob(f"{folder}/*-{role}-torch.json*")
        if not found:
            print(json.dumps({"dir": folder, "role": role, "error": "no trace"}))
            continue
        trace = load(found[0])
        host = uncovered_shares(trace.events, trace.get_steps())
        device = device_idle_shares(trace.events)
        print(json.dumps({"dir": folder, "role": role, "steps": len(host),
                          "host_idle_mean": round(float(host.mean()), 4) if len(host) else None,
                          "host_idle_median": round(float(host.median()), 4) if len(host) else None,
                          "device_idle_mean": round(float(device.mean()), 4) if len(device) else None,
                          "device_idle_median": round(float(device.median()), 4) if len(device) else None,
                          "device_idle_max": round(float(device.max()), 4) if len(device) else None}))
