"""The ladder: what each lever of a chapter's reference solution buys, measured by the grader on this machine.

A chapter may declare a ``[ladder]`` in chapter.toml: ``base``, the settings (``--set key=value``) that switch
every lever of its reference solution off, and ``rungs``, each a label and the settings that switch one lever on.
The grader runs the slow script, then the solution at ``base`` (the earlier chapters' fixes only), then the
solution with each rung's settings added to the rungs below it, so the last rung is the solution as graded.

The rungs are the reference solution's, not the learner's: the grader can only switch levers it knows, and a
lab has no switches; the reference's ladder is what a learner compares their own rungs with. Every run is
timed like a check's (window opened -> trained weights arrived, on the grader's clock), untraced, each trial
under one secret for every rung, the rungs' order reversed every other trial. The ladder grades nothing: it
is a measurement, and on a GPU it takes minutes (each rung compiles and warms up), so it runs only when asked
(``workbook check NN --ladder``).
"""

from __future__ import annotations

import datetime
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.base.chapters import Chapter
from checker.base.errors import WorkbookError
from checker.grader.runs import run_script
from checker.grader.sandbox import check_folder


@dataclass(frozen=True)
class Rung:
    label: str
    variant: str                 # "slow" or "solution"
    settings: tuple[str, ...]    # --set key=value, the base's and every rung's up to this one


def declared(chapter: Chapter) -> dict[str, Any]:
    """The chapter's [ladder] table, or a one-line error saying it has none."""
    ladder = chapter.raw.get("ladder")
    if not ladder:
        raise WorkbookError(f"--ladder: chapter {chapter.id} declares no [ladder] in chapter.toml; 07_capstone_ladder has one")
    return ladder


def rungs(chapter: Chapter) -> list[Rung]:
    """The slow script, the solution with every lever off, then one lever more per rung."""
    ladder = declared(chapter)
    settings = list(ladder.get("base", []))
    found = [Rung("slow script", "slow", ()),
             Rung(str(ladder.get("base_label", "reference solution, every lever off")), "solution", tuple(settings))]
    for rung in ladder.get("rungs", []):
        changed = {item.partition("=")[0] for item in rung["set"]}
        settings = [item for item in settings if item.partition("=")[0] not in changed] + list(rung["set"])
        found.append(Rung(str(rung["label"]), "solution", tuple(settings)))
    return found


def skip_reason(chapter: Chapter, device: str) -> str | None:
    """Why the ladder is not measured on this device (chapter.toml's [ladder] skip.<device>), or None."""
    return (declared(chapter).get("skip") or {}).get(device)


def environment(device: str) -> dict[str, Any]:
    """What the ladder was measured on."""
    import torch

    env = {"device": device, "torch": torch.__version__, "cpu_count": os.cpu_count(),
           "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "gpu": None, "driver": None}
    if device == "cuda":
        env["gpu"] = torch.cuda.get_device_name(0)
        smi = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        env["driver"] = smi.stdout.strip().splitlines()[0] if smi.returncode == 0 and smi.stdout.strip() else None
    return env


def measure(chapter: Chapter, device: str, trials: int | None = None, progress=None,
            workdir: Path | None = None) -> dict[str, Any]:
    """Every rung's runs: {"chapter", "env", "trials", "rows": [{label, variant, settings, samples_per_s: [...]}]}."""
    ladder = rungs(chapter)
    trials = int(trials or declared(chapter).get("trials", 2))
    owned = workdir is None
    workdir = workdir or check_folder()
    try:
        return _measure(chapter, ladder, device, trials, progress, workdir)
    finally:
        if owned:
            shutil.rmtree(workdir, ignore_errors=True)


def _measure(chapter, ladder, device, trials, progress, workdir) -> dict[str, Any]:
    rows = [{"label": r.label, "variant": r.variant, "settings": list(r.settings), "samples_per_s": []} for r in ladder]
    for trial in range(trials):
        secret = (secrets.randbelow(2**31 - 1) + 1, secrets.randbelow(2**31 - 1) + 1)  # one secret for every rung
        for index in (range(len(ladder)) if trial % 2 == 0 else reversed(range(len(ladder)))):
            rung = ladder[index]
            if progress is not None:
                progress(f"ladder, trial {trial + 1} of {trials}: {rung.label}")
            run = run_script(chapter, chapter.script_for(rung.variant), device, workdir=workdir, seed=secret[0],
                             window_key=secret[1], extra_args=[a for s in rung.settings for a in ("--set", s)])
            if not run.window_s:
                raise WorkbookError(f"ladder rung '{rung.label}': the run did not time its window")
            rows[index]["samples_per_s"].append(round(run.samples / run.window_s, 1))
    return {"chapter": chapter.id, "env": environment(device), "trials": trials, "rows": rows}
