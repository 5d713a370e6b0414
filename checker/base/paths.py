"""Where the workbook's folders are.

The repository root holds chapters/, labs/ and solutions/. It is found from WORKBOOK_ROOT, else from the
installed package (an editable install sits in the repository), else from the working directory upwards.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from checker.base.errors import WorkbookError


def _is_root(path: Path) -> bool:
    return (path / "chapters").is_dir() and (path / "checker").is_dir()


@lru_cache(maxsize=1)
def repo_root() -> Path:
    env = os.environ.get("WORKBOOK_ROOT")
    if env:
        root = Path(env).resolve()
        if not _is_root(root):
            raise WorkbookError(f"WORKBOOK_ROOT={env} has no chapters/ folder; point it at the workbook's checkout")
        return root
    candidates = [Path(__file__).resolve().parents[2], *Path.cwd().resolve().parents]  # checker/base/paths.py
    candidates.insert(1, Path.cwd().resolve())
    for path in candidates:
        if _is_root(path):
            return path
    raise WorkbookError("cannot find the workbook's chapters/ folder; run from the checkout or set WORKBOOK_ROOT")


def chapters_dir() -> Path:
    return repo_root() / "chapters"


def labs_dir() -> Path:
    return repo_root() / "labs"


def solutions_dir() -> Path:
    return repo_root() / "solutions"


def results_dir() -> Path:
    return repo_root() / "docs" / "results"


def state_dir() -> Path:
    """Where the workbook keeps what it remembers on this machine: progress, compile caches. ``.workbook/`` in
    the checkout (git ignores it), or $WORKBOOK_STATE_DIR."""
    folder = os.environ.get("WORKBOOK_STATE_DIR")
    return Path(folder) if folder else repo_root() / ".workbook"


def display_path(path: Path | str) -> str:
    """A path as a person reads it: relative to the checkout when inside it."""
    try:
        return str(Path(path).resolve().relative_to(repo_root()))
    except ValueError:
        return str(path)
