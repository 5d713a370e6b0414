"""The learner's progress: what the last check of each lab found, kept in a small state file out of git.

The file is ``.workbook/progress.json`` in the checkout (``/.workbook/`` is in .gitignore), or
``$WORKBOOK_STATE_DIR/progress.json``. Only checks of the learner's own lab (``workbook check NN`` with the
default variant, or ``workbook watch``) are recorded; a variant, a submission or a test never is.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import platform
import tempfile
from pathlib import Path
from typing import Any

from checker.base.errors import WorkbookError
from checker.base.paths import state_dir

NOT_STARTED, FAILING, PASSED = "not started", "failing", "passed"


def state_file() -> Path:
    return state_dir() / "progress.json"


def machine() -> str:
    """Which machine a pass was earned on: a solution unlocks only where the lab passed."""
    return platform.node() or "unknown"


def load() -> dict[str, Any]:
    """The whole state; an unreadable file counts as empty (it is rewritten whole on the next record)."""
    try:
        state = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return {"chapters": {}}
    return state if isinstance(state.get("chapters"), dict) else {"chapters": {}}


def _save(state: dict[str, Any]) -> None:
    path = state_file()
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=".progress-", suffix=".json")
    with os.fdopen(handle, "w") as out:
        json.dump(state, out, indent=1, sort_keys=True)
    os.replace(tmp, path)  # never a half-written file


def chapter_state(chapter_id: str) -> dict[str, Any]:
    return load()["chapters"].get(chapter_id, {})


def update(chapter_id: str, **fields: Any) -> dict[str, Any]:
    state = load()
    entry = state["chapters"].setdefault(chapter_id, {})
    entry.update(fields)
    _save(state)
    return entry


def device_name(device: str) -> str:
    if device == "cuda":
        try:
            import torch

            return torch.cuda.get_device_name(0)
        except Exception:  # noqa: BLE001 - a name is a nicety
            return "CUDA GPU"
    return f"CPU ({platform.machine()})" if platform.machine() else "CPU"


def lab_hash(chapter_id: str) -> str | None:
    """The sha256 of the lab's content as it is now (None: it cannot be read): a verdict belongs to one content."""
    from checker.base.chapters import get_chapter

    try:
        return hashlib.sha256(get_chapter(chapter_id).lab_script.read_bytes()).hexdigest()
    except (OSError, WorkbookError):
        return None


def lab_changed(chapter_id: str, entry: dict[str, Any] | None = None) -> bool:
    """Whether the lab's content differs from the one its last recorded check saw (False when not recorded)."""
    entry = chapter_state(chapter_id) if entry is None else entry
    return "lab_sha256" in entry and entry["lab_sha256"] != lab_hash(chapter_id)


def record_check(report, lab_sha256: str | None = None) -> dict[str, Any]:
    """Record one check of the learner's lab: its verdict, the failing checks with their evidence, the speedup,
    and the hash of the lab it checked (``lab_sha256``, taken before the check ran; else now)."""
    checks = {c.name: c for c in report.checks}
    failed = [c.name for c in report.checks if c.status == "failed"]
    selected_all = not any((c.reason or "").startswith("not selected") for c in report.checks)
    speed = checks.get("throughput")
    previous = chapter_state(report.chapter)
    fields: dict[str, Any] = {
        "status": PASSED if not failed else FAILING,
        "failed": failed,
        "evidence": {name: list(checks[name].evidence) for name in failed},
        "every_check": selected_all,  # False after `--only`: a pass of the checks that ran, not of the chapter
        "device": report.device,
        "device_name": device_name(report.device),
        "machine": machine(),
        "date": _dt.date.today().isoformat(),
        "speedup": (speed.measured or {}).get("speedup") if speed and speed.status != "skipped" else None,
        "lab_sha256": lab_sha256 or lab_hash(report.chapter),
    }
    if not failed and selected_all:
        passes = dict(previous.get("passes") or {})
        passes[f"{machine()}/{report.device}"] = {k: fields[k] for k in ("device_name", "date", "speedup")}
        fields["passes"] = passes
    return update(report.chapter, **fields)


def passed_here(chapter_id: str) -> dict[str, Any] | None:
    """The record of a pass of every check of the lab on this machine, if there is one."""
    for key, record in (chapter_state(chapter_id).get("passes") or {}).items():
        if key.split("/", 1)[0] == machine():
            return dict(record, device=key.split("/", 1)[1])
    return None


def _chapter_checks(chapter_id: str) -> list | None:
    """The chapter's [[checks]] (None: a chapter gone from the checkout, of which only the record is known)."""
    from checker.base.chapters import get_chapter

    try:
        return list(get_chapter(chapter_id).checks)
    except Exception:  # noqa: BLE001 - say what is known
        return None


def _gpu_only_checks(chapter_id: str) -> list[str]:
    """The chapter's checks that are skipped on a CPU (chapter.toml's skip.cpu)."""
    return [spec.name for spec in _chapter_checks(chapter_id) or [] if spec.skip_reason_for("cpu")]


def _measures_speed(chapter_id: str) -> bool:
    """Whether the chapter has a speedup to measure (a throughput check) on some device."""
    specs = _chapter_checks(chapter_id)
    return specs is None or any(spec.name == "throughput" for spec in specs)


CHANGED_SINCE = ", but your lab changed since: check again"


def describe(chapter_id: str) -> str:
    """One phrase for `workbook list`: not started / failing (which check) / passed (device, date, speedup), and
    whether the lab changed since that verdict."""
    entry = chapter_state(chapter_id)
    if not entry:
        return NOT_STARTED
    return _verdict(chapter_id, entry) + (CHANGED_SINCE if lab_changed(chapter_id, entry) else "")


def _verdict(chapter_id: str, entry: dict[str, Any]) -> str:
    if entry.get("status") == FAILING:
        return f"failing: {', '.join(entry.get('failed') or ['?'])} (on {entry.get('device')}, {entry.get('date')})"
    passes = entry.get("passes") or {}
    if not passes:  # only the checks chosen with --only ran
        return f"the checks chosen with --only pass (on {entry.get('device')}, {entry.get('date')}); not every check has run"
    shown = []
    for key, record in passes.items():
        if record.get("speedup") is not None:
            speed = f", {record['speedup']:.2f}x"
        elif _measures_speed(chapter_id):
            speed = ", no speedup measured on " + key.split("/")[-1]
        else:  # chapter 00 grades how a script measures, not how fast it runs
            speed = ""
        shown.append(f"{record['device_name']}, {record['date']}{speed}")
    verdict = "passed (" + "; ".join(shown) + ")"
    if all(key.split("/")[-1] == "cpu" for key in passes):
        # a CPU pass is a partial one: say so here too, not only in the check's last line (the speed is said above)
        gpu_only = [name for name in _gpu_only_checks(chapter_id) if name != "throughput"]
        if gpu_only:
            verdict += f", partial: {', '.join(gpu_only)} run only on a GPU"
    return verdict
