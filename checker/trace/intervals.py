"""Interval look-ups the analyses share: which range holds a point in time."""

from __future__ import annotations

import numpy as np


def in_disjoint(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each time in t, the index of the interval holding it (start <= t < end), or -1.

    The intervals must not overlap and must be sorted by start.
    """
    t = np.asarray(t, dtype=np.int64)
    if not len(starts) or not len(t):
        return np.full(len(t), -1, dtype=np.int64)
    idx = np.searchsorted(starts, t, side="right") - 1
    ok = idx >= 0
    ok[ok] = t[ok] < ends[idx[ok]]
    return np.where(ok, idx, -1)


def innermost(t: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each time in t, the index of the innermost interval holding it, or -1.

    The intervals must nest (any two are disjoint or one holds the other, as the calls on one thread do)
    and be sorted by start, longer first on ties. The innermost holder is then the last interval
    starting at or before t that has not ended; the search walks back in growing windows, so it is
    fast for the few points (syncs, copies) the analyses ask about, whatever the number of intervals.
    """
    t = np.asarray(t, dtype=np.int64)
    out = np.full(len(t), -1, dtype=np.int64)
    if not len(starts):
        return out
    last = np.searchsorted(starts, t, side="right") - 1
    for i, (point, j) in enumerate(zip(t, last)):
        width = 64
        while j >= 0:
            lo = max(0, j - width + 1)
            hits = np.flatnonzero(ends[lo:j + 1] > point)
            if hits.size:
                out[i] = lo + hits[-1]
                break
            j, width = lo - 1, width * 4
    return out


def union_length(starts: np.ndarray, ends: np.ndarray) -> int:
    """Total time covered by a set of intervals (overlaps counted once)."""
    merged = merge(starts, ends)
    return int((merged[1] - merged[0]).sum())


def merge(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The union of intervals as sorted, disjoint (starts, ends)."""
    if not len(starts):
        return np.empty(0, np.int64), np.empty(0, np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = np.asarray(starts)[order], np.asarray(ends)[order]
    reach = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > reach[:-1]
    group = np.cumsum(new) - 1
    out_s = s[new]
    out_e = np.zeros(len(out_s), dtype=np.int64)
    np.maximum.at(out_e, group, e)
    return out_s, out_e


def clip(starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray, np.ndarray]:
    """Intervals cut to [lo, hi), empty ones dropped."""
    s, e = np.maximum(starts, lo), np.minimum(ends, hi)
    keep = e > s
    return s[keep], e[keep]


def covered_before(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each point, the time before it covered by at least one of the intervals (overlaps counted once)."""
    points = np.asarray(points, dtype=np.float64)
    run_start, run_end = merge(starts, ends)
    if not len(run_start):
        return np.zeros(len(points))
    covered = np.r_[0.0, np.cumsum(run_end - run_start)]
    i = np.maximum(np.searchsorted(run_start, points, side="right") - 1, 0)
    inside = np.clip(points - run_start[i], 0, run_end[i] - run_start[i])
    return np.where(points >= run_start[0], covered[i] + inside, 0.0)


def points_within(starts: np.ndarray, ends: np.ndarray, threads: np.ndarray, points: np.ndarray,
                  point_threads: np.ndarray) -> np.ndarray:
    """For each interval [start, end] of a thread, how many of the points of that same thread fall in it."""
    counts = np.zeros(len(starts), dtype=np.int64)
    for thread in np.unique(threads):
        here = threads == thread
        at = np.sort(points[point_threads == thread])
        counts[here] = np.searchsorted(at, ends[here], side="right") - np.searchsorted(at, starts[here], side="left")
    return counts

