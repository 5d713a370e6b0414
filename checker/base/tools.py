"""Where the external profilers are: $WORKBOOK_<NAME> when set, else the one on PATH."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def find_tool(name: str) -> str | None:
    """`nsys` or `ncu`: the path in WORKBOOK_NSYS / WORKBOOK_NCU when set (None if it is not an executable file),
    else PATH."""
    named = os.environ.get(f"WORKBOOK_{name.upper()}")
    if named:
        return named if _named_problem(named) is None else None
    return shutil.which(name)


def _named_problem(named: str) -> str | None:
    """What is wrong with a profiler path given in WORKBOOK_<NAME>, if anything."""
    path = Path(named)
    if not path.exists():
        return "no such file"
    if not path.is_file():
        return "not a file"
    if not os.access(path, os.X_OK):
        return "not executable"
    return None


PRODUCTS = {"nsys": "Nsight Systems", "ncu": "Nsight Compute"}


def missing_tool(name: str, asked_by: str = "", otherwise: str = "") -> str:
    """The one sentence said wherever a profiler is needed and not found."""
    where = f"{asked_by}: " if asked_by else ""
    tail = f", or {otherwise}" if otherwise else ""
    variable = f"WORKBOOK_{name.upper()}"
    named = os.environ.get(variable)
    if named and (problem := _named_problem(named)):  # set, but wrong: PATH was not searched, so say what to fix
        return (f"{where}{name} not found ({variable}={named}: {problem}); point {variable} at the "
                f"{name} program, or unset it to use the {name} on PATH{tail}")
    return (f"{where}{name} not found on PATH; install {PRODUCTS.get(name, name)} or set "
            f"{variable}=/path/to/{name}{tail}")


def require_tool(name: str, asked_by: str = "", otherwise: str = "") -> str:
    """The profiler's path, or a WorkbookError that says how to get it."""
    from checker.base.errors import WorkbookError

    found = find_tool(name)
    if found is None:
        raise WorkbookError(missing_tool(name, asked_by, otherwise))
    return found
