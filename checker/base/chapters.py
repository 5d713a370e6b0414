"""A chapter is declared once, in chapters/<id>/chapter.toml; everything else reads it through here."""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

from checker.base.errors import WorkbookError
from checker.base.paths import chapters_dir, labs_dir, repo_root, solutions_dir

DEVICE_KINDS = ("cuda", "cpu")
TRACE_TOOLS = ("torch", "nsys")  # torch.profiler, Nsight Systems: what `workbook check --trace-tool` takes
VARIANTS = ("slow", "lab", "solution")


@dataclass(frozen=True)
class CheckSpec:
    """One check of a chapter: a kind from checker.checks, its thresholds per device kind, and its hint."""

    name: str
    doc: str
    threshold: dict[str, Any]
    skip: dict[str, str]
    options: dict[str, Any]

    def threshold_for(self, device: str) -> Any:
        return self.threshold.get(device)

    def option_for(self, name: str, device: str, default: Any = None) -> Any:
        """An option of the check, per device where chapter.toml gives one (``name.cpu = ...``), else ``default``."""
        value = self.options.get(name)
        if isinstance(value, dict):
            value = value.get(device)
        return default if value is None else value

    def skip_reason_for(self, device: str) -> str | None:
        return self.skip.get(device)


HINT_LEVELS = (("nudge", "a nudge"), ("where", "where to look"), ("pattern", "the pattern"))


@dataclass(frozen=True)
class Hint:
    """One [[hints]] entry: for a check (and, with ``match``, for evidence matching a regex), three steps."""

    check: str
    nudge: str
    where: str
    pattern: str
    match: str | None = None  # a regex over the check's evidence; None: the default hint of that check
    index: int = 0  # its place among the chapter's [[hints]], so that progress can tell hints apart
    when_passed: tuple[str, ...] = ()  # checks this hint takes for passed ("the syncs are gone but..."): it is
    #                                    not given while one of them failed in the same check

    @property
    def steps(self) -> tuple[tuple[str, str], ...]:
        """(label, text) for each step, in the order `workbook hint` gives them."""
        return tuple((label, getattr(self, key)) for key, label in HINT_LEVELS)

    @property
    def text(self) -> str:
        """What a failed check shows: the nudge (the next steps come from `workbook hint`)."""
        return self.nudge


def probe_updates(cfg: dict[str, Any]) -> int:
    """How many window steps a run's update probe draws (``probe_updates`` of a workload's settings): a count, or
    "all" for every window step (checker.grader.runs.draw_probe_steps takes no more than the window holds)."""
    value = cfg.get("probe_updates", 0)
    return sys.maxsize if value == "all" else int(value)


@dataclass(frozen=True)
class Chapter:
    id: str
    number: int
    title: str              # "Host syncs: `.item()` in the training loop": the page's heading, the CLI's title
    summary: str            # the slow pattern in a few words (the index page's table)
    pattern: str
    fix: str
    lab_file: str
    workload: dict[str, dict[str, Any]]
    checks: tuple[CheckSpec, ...]
    hints: tuple[Hint, ...]
    recipe: dict[str, str]
    look_for: dict[str, str]
    raw: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def not_graded_with(self) -> dict[str, str]:
        """Trace tool -> why this chapter's checks cannot be judged from its traces (chapter.toml's
        [not_graded_with], checked by _parse)."""
        return {tool: " ".join(str(why).split()) for tool, why in self.raw.get("not_graded_with", {}).items()}

    @property
    def trace_tools(self) -> tuple[str, ...]:
        """The trace tools `workbook check` grades this chapter with (torch.profiler always)."""
        return tuple(tool for tool in TRACE_TOOLS if tool not in self.not_graded_with)

    @property
    def short_title(self) -> str:
        """The title before its colon ("Host syncs"): the site's navigation and the index table."""
        return self.title.split(":", 1)[0].strip()

    @property
    def heading(self) -> str:
        """The chapter page's heading: "01 · Host syncs: `.item()` in the training loop"."""
        return f"{self.number:02d} · {self.title}"

    @property
    def dir(self) -> Path:
        return chapters_dir() / self.id

    @property
    def slow_script(self) -> Path:
        return self.dir / "slow.py"

    @property
    def lab_script(self) -> Path:
        return labs_dir() / self.id / self.lab_file

    @property
    def solution_script(self) -> Path:
        return solutions_dir() / self.id / self.lab_file

    @property
    def docs_page(self) -> Path:
        return repo_root() / "docs" / "chapters" / f"{self.id}.md"

    def script_for(self, variant: str) -> Path:
        if variant not in VARIANTS:
            raise WorkbookError(f"unknown variant '{variant}'; choose one of {', '.join(VARIANTS)}")
        return {"slow": self.slow_script, "lab": self.lab_script, "solution": self.solution_script}[variant]

    def config(self, device: str) -> dict[str, Any]:
        """The workload and harness settings for a device kind ('cuda' or 'cpu')."""
        if device not in self.workload:
            raise WorkbookError(f"chapter {self.id} declares no [workload.{device}] in chapter.toml")
        return dict(self.workload[device])

    def traced_steps(self, device: str, tail: bool) -> range:
        """The steps a trace records: after warm-up in a traced run of its own, or after the timed window when
        the first timed pair is traced in its tail (``traced_tail``, torch.profiler only: checker.grader.plan)."""
        cfg = self.config(device)
        first = int(cfg["steps"]) if tail else int(cfg["warmup"])
        return range(first, first + int(cfg.get("trace_steps", 10)))

    def check(self, name: str) -> CheckSpec:
        """The [[checks]] entry named ``name``."""
        for spec in self.checks:
            if spec.name == name:
                return spec
        raise KeyError(f"{self.id} declares no check '{name}'")

    def hint_ladder_for(self, check: str, evidence: list[str], failed=()) -> Hint | None:
        """The hint for a failed check: the first whose ``match`` the evidence matches, else the check's default.
        A hint that takes a check for passed (``when_passed``) is not given when that check is in ``failed``."""
        default = None
        for hint in self.hints:
            if hint.check != check or set(hint.when_passed) & set(failed):
                continue
            if hint.match is None:
                default = default or hint
            elif any(re.search(hint.match, line) for line in evidence):
                return hint
        return default

    def first_to_fix(self, failed) -> str | None:
        """Of the failed checks, the one whose hint to follow first: in the chapter's order, skipping a check
        whose hints all take another failed check for passed (the speedup waits for the syncs to go)."""
        failed = [spec.name for spec in self.checks if spec.name in set(failed)]
        for name in failed:
            if self.hint_ladder_for(name, [], failed) is not None or not any(h.check == name for h in self.hints):
                return name
        return failed[0] if failed else None

    def hint_for(self, check: str, evidence: list[str], failed=()) -> str | None:
        """The first step of that hint (what a failed check shows). When its hints all wait on another failed
        check, the hint says to fix that one first."""
        hint = self.hint_ladder_for(check, evidence, failed)
        if hint is not None:
            return hint.text
        waiting = sorted({name for h in self.hints if h.check == check for name in h.when_passed} & set(failed))
        if waiting:
            return f"{' and '.join(waiting)} failed too: fix what it shows first; this check depends on it."
        return None


def _parse(path: Path) -> Chapter:
    try:
        raw = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise WorkbookError(f"{path}: not valid TOML ({err})") from None
    chapter_id = path.parent.name
    if raw.get("id") != chapter_id:
        raise WorkbookError(f"{path}: id = {raw.get('id')!r} must match its folder name {chapter_id!r}")
    checks = tuple(
        CheckSpec(
            name=c["name"],
            doc=c.get("doc", c["name"]),
            threshold=dict(c.get("threshold", {})),
            skip=dict(c.get("skip", {})),
            options={k: v for k, v in c.items() if k not in {"name", "doc", "threshold", "skip"}},
        )
        for c in raw.get("checks", [])
    )
    hints = []
    for index, h in enumerate(raw.get("hints", [])):
        missing = [key for key, _ in HINT_LEVELS if not str(h.get(key, "")).strip()]
        if missing or "check" not in h:
            raise WorkbookError(f"{path}: [[hints]] #{index + 1} needs check, nudge, where and pattern "
                                f"(missing: {', '.join(missing) or 'check'})")
        hints.append(Hint(check=h["check"], match=h.get("match"), index=index, when_passed=tuple(h.get("when_passed", ())),
                          **{key: " ".join(str(h[key]).split()) for key, _ in HINT_LEVELS}))
    hints = tuple(hints)
    recipe = dict(raw.get("recipe", {}))
    look_for = recipe.pop("look_for", {})
    not_graded_with = raw.get("not_graded_with", {})
    if not isinstance(not_graded_with, dict) or set(not_graded_with) - set(TRACE_TOOLS[1:]) \
            or not all(str(why).strip() for why in not_graded_with.values()):
        raise WorkbookError(f"{path}: [not_graded_with] maps {' or '.join(TRACE_TOOLS[1:])} to why the checks cannot "
                            f"use it (torch.profiler always grades); got {raw.get('not_graded_with')!r}")
    return Chapter(
        id=chapter_id,
        number=int(chapter_id.split("_", 1)[0]),
        title=raw["title"],
        summary=raw.get("summary", "").strip(),
        pattern=raw["pattern"].strip(),
        fix=raw.get("fix", "").strip(),
        lab_file=raw.get("lab_file", "train.py"),
        workload=raw.get("workload", {}),
        checks=checks,
        hints=hints,
        recipe=recipe,
        look_for=look_for,
        raw=raw,
    )


def too_few_steps(steps: int, warmup: int, device: str) -> str | None:
    """Why ``steps`` leaves nothing to time after ``warmup`` warm-up steps on ``device`` (None: it does not)."""
    if steps > warmup:
        return None
    return (f"--steps {steps}: the first {warmup} steps on {device} are warm-up, before anything is timed; "
            f"give --steps {warmup + 1} or more")


@lru_cache(maxsize=None)
def all_chapters() -> tuple[Chapter, ...]:
    found = sorted(chapters_dir().glob("[0-9][0-9]_*/chapter.toml"))
    return tuple(_parse(path) for path in found)


def get_chapter(key: str) -> Chapter:
    """Find a chapter by its id ('01_item_syncs') or its number ('01', '1')."""
    chapters = all_chapters()
    for chapter in chapters:
        if key == chapter.id:
            return chapter
    if key.isdigit():
        for chapter in chapters:
            if int(key) == chapter.number:
                return chapter
    known = ", ".join(c.id for c in chapters) or "none"
    raise WorkbookError(f"unknown chapter '{key}'; known chapters: {known} (see `workbook list`)")
