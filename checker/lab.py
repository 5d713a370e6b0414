"""What chapter scripts and workloads import: ``from checker.lab import start`` (and ``Workload``).

The harness itself lives in ``checker/candidate/``, the code that runs inside the candidate's process and
that the grader does not trust; see that package's docstring.
"""

from checker.candidate.session import HARNESS_KEYS, Session, current, marked_range, start
from checker.base.workloads import KeyedOrder, Workload

__all__ = ["HARNESS_KEYS", "KeyedOrder", "Session", "Workload", "current", "marked_range", "start"]


def main(argv: list[str] | None = None) -> int:
    """``--probe``: the grader checks that an unprivileged user can import the harness (and torch)."""
    return 0
