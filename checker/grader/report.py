"""What grading one candidate returns: every check's result, the notes and where the seconds went."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from checker.checks import FAILED, CheckResult


@dataclass
class Report:
    chapter: str
    variant: str
    candidate: str
    device: str
    trace_tool: str
    checks: list[CheckResult]
    wall_s: float
    runs: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the grader saw besides the checks (processes left running)
    timings: list[dict[str, Any]] = field(default_factory=list)  # where the check's seconds went, on the grader's clock

    @property
    def passed(self) -> bool:
        return all(c.status != FAILED for c in self.checks)

    @property
    def exit_code(self) -> int:
        """What `workbook check` exits with: 0 when every check passed (skips allowed), 1 when one failed."""
        return 0 if self.passed else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "chapter": self.chapter, "variant": self.variant, "candidate": self.candidate, "device": self.device,
            "trace_tool": self.trace_tool, "passed": self.passed, "wall_s": round(self.wall_s, 1),
            "checks": [c.to_json() for c in self.checks], "notes": self.notes, "timings": self.timings,
        }
