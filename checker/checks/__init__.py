"""The checks a chapter can declare. Each kind is one module; each is a pure function of the grader's
evidence (``checker.checks.evidence.Evidence``) and the chapter's spec, returning a CheckResult.

A check declares what it needs and when it means anything::

    @check("throughput", needs=(TIMED,), after=("same_work",), key="speedup", fmt="{:.2f}x")
    def throughput(evidence, spec):
        \"\"\"runs at least the threshold times the slow script's samples/s, measured side by side\"\"\"

The grader plans its runs from ``needs`` (checker.grader.plan), and skips a check whose ``after`` checks did
not pass. The docstring's first line is the claim a learner reads when chapter.toml gives no ``doc``.

A check ends in one of three states: passed; failed, with the evidence and the chapter's hint; or skipped,
with the reason it could not run here.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from checker.base.chapters import CheckSpec
    from checker.checks.evidence import Evidence

PASSED, FAILED, SKIPPED = "passed", "failed", "skipped"
NOT_SELECTED = "not selected"  # how a skip left out by `workbook check --only` begins its reason

# What a check may need of the grader (checker.grader.plan turns these into runs):
TIMED = "timed"                    # the timed pairs, where this device grades speed
TIMED_CPU = "timed_cpu"            # the same pairs, on a CPU only (the training process's CPU time over every pair)
RUN = "run"                        # the candidate's run the grader watched (its processes, its step times)
TRACE = "trace"                    # the candidate's traced run and its trace
BASELINE_TRACE = "baseline_trace"  # the slow script traced the same way, over the same steps
BASELINE_TRACE_CPU = "baseline_trace_cpu"  # the same, on a CPU only (what the slow script's own optimizer reads)
VERDICTS = "verdicts"              # the referee's judgement of every pair's weights
NCU = "ncu"                        # Nsight Compute on one kernel the check picks from the candidate's trace
JOBS = "jobs"                      # the grader's own traced run of every job of the learner's assignment (chapter 08)
NEEDS = (TIMED, TIMED_CPU, RUN, TRACE, BASELINE_TRACE, BASELINE_TRACE_CPU, VERDICTS, NCU, JOBS)


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


CheckFunction = Callable[["Evidence", "CheckSpec"], CheckResult]


@dataclass(frozen=True)
class CheckKind:
    """One kind of check as registered: its function and what it declares."""

    name: str
    function: CheckFunction
    needs: frozenset[str]
    after: tuple[str, ...] = ()
    key: str | None = None  # the entry of ``measured`` that sums the check up in results tables
    fmt: str = "{:g}"
    ncu_target: Callable | None = None  # (trace, spec, cfg) -> checker.checks.evidence.NcuTarget, for NCU
    thresholded: bool = True  # it judges against chapter.toml's threshold for the device (none there: skipped)
    settled: Callable | None = None  # (speed, spec, device) -> bool: for TIMED, no more timed pairs can change it
    # (traced pair, device) -> float or None: a check that compares the speed of the traced pair's two runs gives
    # the grader the measure it judges against its threshold; above it, the pair is made twice more and the median
    # one is read (a machine busy while one pair ran moves one pair, not three)
    traced_measure: Callable | None = None
    # (judged pair, spec or None, device, what the baseline is called) -> (problems, weight distance): the check that
    # judges a pair's work lends the grader this, to check a reference solution against the slow script
    pair_judge: Callable | None = None
    # a chapter with this check teaches data loading: a CPU trace's time waiting for a batch is the lesson, not
    # work hidden from the trace
    data_wait_is_work: bool = False

    @property
    def claim(self) -> str:
        return ((self.function.__doc__ or self.name).strip().splitlines() or [self.name])[0]

    def __call__(self, evidence: "Evidence", spec: "CheckSpec") -> CheckResult:
        return self.function(evidence, spec)


KINDS: dict[str, CheckKind] = {}
# check name -> (the key in `measured` that sums it up, a format for it): what results tables show
KEY_MEASURE: dict[str, tuple[str, str]] = {}
# check name -> what a failure says in a gradebook cell, from the check's (measured, threshold), for checks that
# fail on more than one measure: the one that decided, never the key measure when that one was within tolerance
FAILURE_MEASURE: dict[str, Callable[[dict[str, Any], Any], "str | None"]] = {}


def check(name: str, *, needs: tuple[str, ...], after: tuple[str, ...] = (), key: str | None = None,
          fmt: str = "{:g}", ncu_target: Callable | None = None, thresholded: bool = True,
          settled: Callable | None = None, pair_judge: Callable | None = None, data_wait_is_work: bool = False,
          traced_measure: Callable | None = None,
          failure: Callable[[dict[str, Any], Any], "str | None"] | None = None) -> Callable[[CheckFunction], CheckKind]:
    """Register a check kind under the name chapter.toml uses in [[checks]] name = ...

    ``failure``: for a check that can fail on another measure than ``key``, what decided a failure (None: it
    cannot tell, and a gradebook cell shows no number).
    """
    unknown = set(needs) - set(NEEDS)
    if unknown:
        raise ValueError(f"check {name}: unknown needs {sorted(unknown)}; known: {', '.join(NEEDS)}")

    def register(function: CheckFunction) -> CheckKind:
        kind = CheckKind(name, function, frozenset(needs), tuple(after), key, fmt, ncu_target, thresholded, settled,
                         traced_measure, pair_judge, data_wait_is_work)
        KINDS[name] = kind
        if key is not None:
            KEY_MEASURE[name] = (key, fmt)
        if failure is not None:
            FAILURE_MEASURE[name] = failure
        return kind

    return register


def pair_judge() -> CheckKind:
    """The check kind that judges whether a pair of runs did the same work (it declares ``pair_judge``)."""
    found = [kind for kind in KINDS.values() if kind.pair_judge is not None]
    if len(found) != 1:
        raise LookupError(f"{len(found)} check kinds declare pair_judge; the grader needs exactly one")
    return found[0]


def result(spec: "CheckSpec", status: str, **fields: Any) -> CheckResult:
    return CheckResult(name=spec.name, doc=spec.doc, status=status, **fields)


def _register_all() -> None:
    """Import every module of this package: each registers its check kinds with @check."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


_register_all()
