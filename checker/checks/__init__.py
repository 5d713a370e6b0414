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
NOT_SELECTED = "not selected"  # how a skip left out by `workbook check --only` begins its reason


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
# check name -> (the key in `measured` that sums it up, a format for it): what results tables show
KEY_MEASURE: dict[str, tuple[str, str]] = {}
# check name -> what a failure says in a gradebook cell, from the check's (measured, threshold), for checks that
# fail on more than one measure: the one that decided, never the key measure when that one was within tolerance
FAILURE_MEASURE: dict[str, Callable[[dict[str, Any], Any], "str | None"]] = {}
# checks that compare the candidate's trace with the baseline's (the traced pair then traces both)
NEEDS_BASELINE_TRACE: set[str] = set()


def check(name: str, key: str | None = None, fmt: str = "{:g}", baseline_trace: bool = False,
          failure: Callable[[dict[str, Any], Any], "str | None"] | None = None
          ) -> Callable[[CheckFunction], CheckFunction]:
    """Register a check kind under the name chapter.toml uses in [[checks]] name = ...

    ``key`` names the entry of ``measured`` that sums the check up in results tables, shown with ``fmt``;
    ``baseline_trace``: the check reads the baseline's trace too; ``failure``: for a check that can fail on
    another measure than ``key``, what decided a failure (None: it cannot tell, and the cell shows no number).
    """

    def register(function: CheckFunction) -> CheckFunction:
        REGISTRY[name] = function
        if baseline_trace:
            NEEDS_BASELINE_TRACE.add(name)
        if key is not None:
            KEY_MEASURE[name] = (key, fmt)
        if failure is not None:
            FAILURE_MEASURE[name] = failure
        return function

    return register


def result(spec: "CheckSpec", status: str, **fields: Any) -> CheckResult:
    return CheckResult(name=spec.name, doc=spec.doc, status=status, **fields)


def _register_all() -> None:
    """Import every module of this package: each registers its check kinds with @check."""
    import importlib
    import pkgutil

    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


_register_all()
