import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("WORKBOOK_ROOT", str(ROOT))


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not _has_cuda(), reason="needs a CUDA GPU; this machine has none")


@pytest.fixture
def workbook():
    """Run the `workbook` CLI in a subprocess, as a user would; returns the CompletedProcess."""
    import subprocess

    def run(*args, timeout=600):
        return subprocess.run([sys.executable, "-m", "checker", *args], capture_output=True, text=True,
                              timeout=timeout, cwd=ROOT)

    return run


_GRADED = {}


@pytest.fixture(scope="session")
def graded():
    """`workbook check` of a chapter's variant on the CPU, made once per test session and shared."""
    from checker.chapters import get_chapter
    from checker.evaluate import evaluate

    def grade(chapter_id: str, variant: str):
        key = (chapter_id, variant)
        if key not in _GRADED:
            _GRADED[key] = evaluate(get_chapter(chapter_id), variant=variant, device="cpu")
        return _GRADED[key]

    return grade
