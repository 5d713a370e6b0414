"""torch.compile's on-disk caches (Inductor's FX graph and AOTAutograd caches, Triton's kernels), kept between
the runs of one candidate script so that its second run does not compile again what the first compiled.

Whose cache: one per candidate script's content (with the chapter, the device, torch and Python): the runs of
that exact script read and write it, nothing else does; and only in a chapter whose scripts compile (chapter.toml's
``compile_cache``), since a store that outlives a run can hold anything for the next run (in chapter 00, a report
measured once and read back by every later check). The slow script and the reference solution never use
one. A candidate can only ever put into it what its own later runs read, so nothing it writes reaches another
script's runs or the grader; and nothing in it can make a run do less work, since every run trains under a
secret of its own (the weights and data a cache could hold are of no use to the next run).

Where: the grader copies the cache in before the run (``TORCHINDUCTOR_CACHE_DIR``, ``TRITON_CACHE_DIR``) and back
after it, regular files only (a link the run left there is not followed), at most ``MAX_BYTES``. A run sees it at
the same path every time (``checkout``): Inductor's cached kernels name the folder they were compiled in, and
autotuning writes its choices beside them, so a cache moved to a new folder per run sent a later run back to an
earlier run's folder (on an H200, where that folder was no longer the run's, "Permission denied" on a
``.best_config`` file). ``workbook check`` keeps it under the state folder (.workbook/compile-cache/) for the next check;
``WORKBOOK_COMPILE_CACHE=0`` turns it off (every run compiles cold).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import platform
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from checker.base.paths import state_dir

MAX_BYTES = 1 << 30
KEEP = 16  # caches kept under the state folder, newest first
# Where runs see a cache: one folder for every check on the machine, whatever TMPDIR each check has. Under a
# per-check TMPDIR (each lane of scripts/gpu_lanes.sh, a Slurm job's) two checks of one script shared the store but
# not the place: one lane's cached kernels named the other lane's folder, where a run of the other user fails with
# "Permission denied", while each held its own lock, so both wrote the store at once.
PLACE_ROOT = Path("/tmp")


def enabled() -> bool:
    """On unless WORKBOOK_COMPILE_CACHE=0, also where runs are dropped to an unprivileged user: the cache sits at one
    path per script for every run (``checkout``), so an autotuning file written by one run's user is not refused to
    the next, and a second check of the same script warms up from the first one's compiled kernels."""
    return os.environ.get("WORKBOOK_COMPILE_CACHE") != "0"


def key_for(chapter_id: str, script: Path, device: str) -> str:
    import torch

    digest = hashlib.sha256()
    for part in (chapter_id, device, torch.__version__, str(torch.version.cuda), platform.python_version()):
        digest.update(part.encode() + b"\0")
    digest.update(script.read_bytes())
    return digest.hexdigest()[:24]


def store_for(chapter_id: str, script: Path, device: str) -> Path | None:
    """The cache folder of this script's runs, made if needed, or None when caching is off."""
    if not enabled():
        return None
    root = state_dir() / "compile-cache"
    root.mkdir(parents=True, exist_ok=True)
    folder = root / key_for(chapter_id, script, device)
    folder.mkdir(exist_ok=True)
    os.utime(folder)
    _prune(root)
    return folder


def _prune(root: Path) -> None:
    """Keep the ``KEEP`` newest stores. Checks run side by side (a class graded in parallel lanes, pytest's
    workers) prune the same folder at once: a store another check removed between the listing and its ``stat``
    is simply gone, not an error."""
    ages = []
    for store in root.iterdir():
        try:
            ages.append((store.stat().st_mtime, store))
        except FileNotFoundError:
            continue
    ages.sort(key=lambda age: age[0], reverse=True)
    for _, old in ages[KEEP:]:
        shutil.rmtree(old, ignore_errors=True)


def copy_regular_files(source: Path, target: Path, limit: int = MAX_BYTES) -> int:
    """Copy the regular files under ``source`` to ``target`` (folders made as needed; links, sockets and devices
    left out, never followed); stop at ``limit`` bytes. Returns the bytes copied."""
    copied = 0
    for folder, dirs, files in os.walk(source, followlinks=False):
        here = Path(folder)
        dirs[:] = [d for d in dirs if not (here / d).is_symlink()]
        for name in files:
            path = here / name
            try:
                info = path.lstat()
                if not stat.S_ISREG(info.st_mode) or copied + info.st_size > limit:
                    continue
                destination = target / path.relative_to(source)
                destination.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, destination, follow_symlinks=False)
            except FileNotFoundError:
                continue  # removed while we walked (a store pruned by a check beside this one): not copied
            copied += info.st_size
    return copied


def environment(run_cache: Path) -> dict[str, str]:
    return {"TORCHINDUCTOR_CACHE_DIR": str(run_cache), "TRITON_CACHE_DIR": str(run_cache / "triton")}


@dataclass
class Claim:
    """A store held by one check: its runs see the cache at ``place``, the same path every time. Held until
    ``release`` (a lock), so that a second check of the same script at the same time compiles cold instead."""

    store: Path
    place: Path
    lock: IO

    def fill(self, owner: tuple[int, int] | None) -> None:
        """Before a run: the store's files at ``place``, owned by the run's user."""
        shutil.rmtree(self.place, ignore_errors=True)
        self.place.mkdir(mode=0o700)
        copy_regular_files(self.store, self.place)
        if owner is not None:
            uid, gid = owner
            for folder, dirs, files in os.walk(self.place):
                for name in [folder, *(os.path.join(folder, n) for n in dirs + files)]:
                    os.chown(name, uid, gid, follow_symlinks=False)

    def empty(self, keep: bool) -> None:
        """After a run: what it left copied back into the store (``keep``: it ended well), ``place`` removed."""
        try:
            if keep and self.place.is_dir():
                copy_regular_files(self.place, self.store)
        finally:
            shutil.rmtree(self.place, ignore_errors=True)

    def release(self) -> None:
        shutil.rmtree(self.place, ignore_errors=True)
        self.lock.close()


def claim(store: Path) -> Claim | None:
    """Hold ``store`` for one check; its runs will see the cache at ``/tmp/workbook-compile-<uid>/<key>`` (the
    same path under any TMPDIR: ``PLACE_ROOT``), in a folder of the grader's that no run can write. None where
    another check holds it now, or that folder is not the grader's: the check's runs then compile cold."""
    parent = PLACE_ROOT / f"workbook-compile-{os.geteuid()}"
    try:
        parent.mkdir(mode=0o711)
    except FileExistsError:
        pass
    info = parent.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
        return None
    os.chmod(parent, 0o711)
    key = hashlib.sha256(str(store.resolve()).encode()).hexdigest()[:24]
    lock = open(parent / f"{key}.lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return None
    _sweep(parent, keep=key)
    return Claim(store=store, place=parent / key, lock=lock)


def _sweep(parent: Path, keep: str) -> None:
    """Remove the places of checks that ended without releasing them (a grading task killed at its timeout): a
    place whose lock nobody holds is no check's. Its store keeps what the runs copied back."""
    for lock_file in parent.glob("*.lock"):
        key = lock_file.stem
        if key == keep:
            continue
        try:
            with open(lock_file, "a") as handle:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(parent / key, ignore_errors=True)  # the empty lock file stays: unlinked, a check
                # that opened it just before could lock a file no later check would see
        except (BlockingIOError, OSError):
            continue  # held: a check is using it
