"""The timeline's kernels row: shaded by the share of each pixel the GPU was busy (checker.trace.timeline)."""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 200)), min_size=1, max_size=30),
       st.lists(st.integers(-50, 1300), min_size=1, max_size=20))
def test_the_timelines_busy_time_is_the_union_of_the_kernels(intervals, points):
    """The kernels row's shading reads the time covered by at least one kernel before each point: overlapping
    kernels (several streams) count once, as a pixel-by-pixel count of the covered time says."""
    from checker.trace.intervals import covered_before

    starts = np.array([s for s, _ in intervals], dtype=float)
    ends = starts + np.array([d for _, d in intervals], dtype=float)
    covered = np.zeros(1400, dtype=bool)  # unit cells [t, t + 1) of the time from -50 to 1350
    for s, e in zip(starts.astype(int), ends.astype(int)):
        covered[s + 50:e + 50] = True
    expected = [covered[:p + 50].sum() for p in points]
    assert covered_before(np.array(points, dtype=float), starts, ends).tolist() == expected
