"""Where the external profilers are: $WORKBOOK_<NAME> when set, else the one on PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_tool(name: str) -> str | None:
    """`nsys` or `ncu`: the path in WORKBOOK_NSYS / WORKBOOK_NCU when set (None if it is not a file), else PATH."""
    named = os.environ.get(f"WORKBOOK_{name.upper()}")
    if named:
        return named if Path(named).is_file() else None
    return shutil.which(name)


PRODUCTS = {"nsys": "Nsight Systems", "ncu": "Nsight Compute"}


def missing_tool(name: str, asked_by: str = "", otherwise: str = "") -> str:
    """The one sentence said wherever a profiler is needed and not found."""
    where = f"{asked_by}: " if asked_by else ""
    tail = f", or {otherwise}" if otherwise else ""
    return (f"{where}{name} not found on PATH; install {PRODUCTS.get(name, name)} or set "
            f"WORKBOOK_{name.upper()}=/path/to/{name}{tail}")


def require_tool(name: str, asked_by: str = "", otherwise: str = "") -> str:
    """The profiler's path, or a WorkbookError that says how to get it."""
    from checker.base.errors import WorkbookError

    found = find_tool(name)
    if found is None:
        raise WorkbookError(missing_tool(name, asked_by, otherwise))
    return found
