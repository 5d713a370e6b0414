"""The checks a chapter can declare. Each kind is one module; each returns a CheckResult.

A check ends in one of three states: passed; failed, with the evidence and the chapter's hint; or skipped,
with the reason it could not run here.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from checker.chapters import CheckSpec
    from checker.evaluate import Evaluation

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"


@dataclass
class CheckResult:
    name: str
    doc: str
    status: str
    measured: dict[str, Any] = field(default_factory=dict)
    threshold: Any = None
    evidence: list[str] = field(default_factory=list)
    hint: str | None = None
    reason: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


CheckFunction = Callable[["Evaluation", "CheckSpec"], CheckResult]
REGISTRY: dict[str, CheckFunction] = {}


def check(name: str) -> Callable[[CheckFunction], CheckFunction]:
    """Register a check kind under the name chapter.toml uses in [[checks]] name = ..."""

    def register(function: CheckFunction) -> CheckFunction:
        REGISTRY[name] = function
        return function

    return register


def result(spec: "CheckSpec", status: str, **fields: Any) -> CheckResult:
    return CheckResult(name=spec.name, doc=spec.doc, status=status, **fields)


from checker.checks import host_syncs, same_work, throughput  # noqa: E402,F401  (registers the kinds)
