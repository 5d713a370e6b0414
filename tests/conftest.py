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
