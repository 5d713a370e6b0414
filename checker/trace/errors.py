"""The one error the trace engine raises for bad input."""

from __future__ import annotations

from checker.base.errors import WorkbookError


class TraceError(WorkbookError):
    """A trace that cannot be read or analysed. The message is one line a person can act on."""
