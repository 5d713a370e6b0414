"""The slow script's speed, measured once per grading worker and shared by the students it grades.

A check compares a candidate with the slow script twice over: its *speed* (throughput) and its *work*
(same_work: the weights, against a run trained under the same secret). ``workbook check`` measures both in
pairs, a baseline run beside each candidate run. Grading a class that way re-runs the slow script for every
student, about half of the GPU time. A ``BaselineBank`` splits the two:

* **speed**: the slow script's timed windows on this worker's device, measured when the first student needs
  them (one run per trial), then one more run after every ``every`` students so that drift shows; a
  student's speedup is the median of the latest ``trials`` windows over each of its own windows. The speed
  does not depend on the secret, so sharing it gives nothing away.
* **work**: the weights are still compared under a fresh secret per candidate run, never shared (a run sees
  its secret; a secret used twice could be answered from a stash). The run trained beside the candidate is
  the chapter's reference solution, which does the slow script's work in the solution's time. It is trusted
  because it is checked: the bank's first baseline run is paired with a reference run under one secret and
  the referee must find the same work, or grading stops.

Chapters whose checks read the slow script's own trace (kernel and launch counts) keep a baseline run per
student (it is traced beside the candidate), as does a chapter without a reference solution.

The bank lives in the grader's memory and travels to each student's grading process in its request and
back in its result: no file a submission could reach holds it.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Any

DEFAULT_EVERY = 5


@dataclass
class BaselineBank:
    every: int = DEFAULT_EVERY  # students between two re-measurements
    windows: list[dict[str, Any]] = field(default_factory=list)  # {"window_s", "samples", "at"}, oldest first
    since: int = 0  # students graded since the last measurement
    reference: dict[str, Any] | None = None  # the referee's word on the reference solution vs the slow script
    runs: int = 0  # baseline runs this bank made (timed and reference-checking)

    # -- what the grader asks of it -----------------------------------------------------------------
    def due(self, trials: int) -> int:
        """How many timed baseline runs to make before the next student: enough for ``trials``, then one
        every ``every`` students."""
        if len(self.windows) < trials:
            return trials - len(self.windows)
        return 1 if self.every and self.since >= self.every else 0

    def add(self, window_s: float, samples: int) -> None:
        self.windows.append({"window_s": window_s, "samples": samples, "at": round(time.time(), 1)})
        self.since = 0

    def recent(self, trials: int) -> list[dict[str, Any]]:
        return self.windows[-max(trials, 1):]

    def graded_one(self) -> None:
        self.since += 1

    def summary(self) -> str | None:
        """One line: how many baseline windows, their median and spread (None before the first)."""
        if not self.windows:
            return None
        seconds = [w["window_s"] for w in self.windows]
        middle = statistics.median(seconds)
        spread = (max(seconds) - min(seconds)) / middle if middle else 0.0
        return (f"the slow script's window, {len(seconds)} run{'s' if len(seconds) != 1 else ''} on this worker: "
                f"median {middle:.3f} s, {min(seconds):.3f}-{max(seconds):.3f} s ({spread:.1%} spread)")

    # -- travelling between processes ---------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> "BaselineBank":
        if not data:
            return cls()
        return cls(every=int(data.get("every", DEFAULT_EVERY)), windows=list(data.get("windows", [])),
                   since=int(data.get("since", 0)), reference=data.get("reference"), runs=int(data.get("runs", 0)))
