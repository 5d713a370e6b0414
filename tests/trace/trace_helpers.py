"""Helpers of the trace engine's tests: where the recorded traces are, and hand-made event tables."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "tests" / "data" / "traces"
PROGRAMS = ("pageable_item", "pinned_clean", "mask_any")
FORMATS = {"kineto": "kineto.json.gz", "nsys": "nsys.sqlite.gz"}


def gpu_trace_path(program: str, fmt: str) -> Path:
    """A trace of scripts/trace_fixture_programs.py recorded on an H100 (7 marked steps)."""
    return TRACES / program / FORMATS[fmt]


def cpu_trace_path(program: str) -> Path:
    """The same program run on the CPU under torch.profiler (with_stack=True)."""
    return TRACES / "cpu" / f"{program}.json.gz"


def need(path: Path):
    """Skip with a reason naming the capture command when a recorded trace is missing."""
    return pytest.mark.skipif(
        not path.exists(),
        reason=f"{path.relative_to(ROOT)} is missing: record it with scripts/trace_fixture_programs.py on a GPU "
               "(see that script's docstring)")


def make_events(rows: list[dict]) -> pd.DataFrame:
    """An event table from a few hand-written rows (missing columns get their empty value)."""
    from checker.trace.events import finish

    return finish(pd.DataFrame(rows))
