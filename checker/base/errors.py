"""Errors meant for a person: one line that says what was wrong and what to do."""


class WorkbookError(Exception):
    """Bad input or an environment problem. The CLI prints the message alone and exits 2."""

    exit_code = 2
