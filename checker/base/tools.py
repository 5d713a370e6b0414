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
