"""torch.compile's on-disk caches (Inductor's FX graph and AOTAutograd caches, Triton's kernels), kept between
the runs of one candidate script so that its second run does not compile again what the first compiled.

Whose cache: one per candidate script's content (with the chapter, the device, torch and Python): the runs of
that exact script read and write it, nothing else does. The slow script and the reference solution never use
one. A candidate can only ever put into it what its own later runs read, so nothing it writes reaches another
script's runs or the grader; and nothing in it can make a run do less work, since every run trains under a
secret of its own (the weights and data a cache could hold are of no use to the next run).

Where: the grader copies the cache into the run's private folder before the run (``TORCHINDUCTOR_CACHE_DIR``,
``TRITON_CACHE_DIR``) and back after it, regular files only (a link the run left there is not followed), at most
``MAX_BYTES``. ``workbook check`` keeps it under the state folder (.workbook/compile-cache/) for the next check;
``WORKBOOK_COMPILE_CACHE=0`` turns it off (every run compiles cold). Where runs are dropped to an unprivileged
user it is off unless ``WORKBOOK_COMPILE_CACHE=1`` (see ``enabled``).
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import stat
from pathlib import Path

from checker.base.paths import state_dir

MAX_BYTES = 1 << 30
KEEP = 16  # caches kept under the state folder, newest first


def enabled(runs_as_another_user: bool = False) -> bool:
    """On unless WORKBOOK_COMPILE_CACHE=0. Off by default where runs are dropped to another user: there, on an
    H200, a second run of chapter 05's solution could not write an autotuning file its cache held
    (docs/results/history/2026-11-25-h200-call6-checks.jsonl), a cause not found yet; WORKBOOK_COMPILE_CACHE=1
    turns it on anyway."""
    setting = os.environ.get("WORKBOOK_COMPILE_CACHE")
    if setting is not None:
        return setting != "0"
    return not runs_as_another_user


def key_for(chapter_id: str, script: Path, device: str) -> str:
    import torch

    digest = hashlib.sha256()
    for part in (chapter_id, device, torch.__version__, str(torch.version.cuda), platform.python_version()):
        digest.update(part.encode() + b"\0")
    digest.update(script.read_bytes())
    return digest.hexdigest()[:24]


def store_for(chapter_id: str, script: Path, device: str, runs_as_another_user: bool = False) -> Path | None:
    """The cache folder of this script's runs, made if needed, or None when caching is off."""
    if not enabled(runs_as_another_user):
        return None
    root = state_dir() / "compile-cache"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / key_for(chapter_id, script, device)
    folder.mkdir(exist_ok=True)
    os.utime(folder)
    for old in sorted(root.iterdir(), key=lambda p: p.stat().st_mtime, reverse=True)[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)
    return folder


def copy_regular_files(source: Path, target: Path, limit: int = MAX_BYTES) -> int:
    """Copy the regular files under ``source`` to ``target`` (folders made as needed; links, sockets and devices
    left out, never followed); stop at ``limit`` bytes. Returns the bytes copied."""
    copied = 0
    for folder, dirs, files in os.walk(source, followlinks=False):
        here = Path(folder)
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
        for name in files:
            path = here / name
            info = path.lstat()
            if not stat.S_ISREG(info.st_mode) or copied + info.st_size > limit:
                continue
            destination = target / path.relative_to(source)
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination, follow_symlinks=False)
            copied += info.st_size
    return copied


def environment(run_cache: Path) -> dict[str, str]:
    return {"TORCHINDUCTOR_CACHE_DIR": str(run_cache), "TRITON_CACHE_DIR": str(run_cache / "triton")}
