"""Fixtures of the trace engine's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def loaded():
    """load() each recorded trace once per test session."""
    from checker.trace import load

    cache: dict = {}

    def get(path: Path, **kwargs):
        key = (str(path), tuple(sorted(kwargs.items())))
        if key not in cache:
            cache[key] = load(path, **kwargs)
        return cache[key]

    return get
