"""`pytest chapters/<id>` runs the chapter's checks through the plugin: one test per check, same verdicts."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.slow


def run_pytest(*options):
    return subprocess.run([sys.executable, "-m", "pytest", "chapters/01_item_syncs", "-p", "no:cacheprovider",
                           "-q", "-rs", "--workbook-device", "cpu", *options],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_solution_passes_with_a_skip_that_says_why():
    proc = run_pytest("--workbook-variant", "solution")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 passed, 2 skipped" in proc.stdout
    assert "no device queue to drain" in proc.stdout  # the skip reason reaches the user


def test_lab_fails_the_sync_check_with_its_evidence_and_hint(pristine_lab):
    proc = run_pytest("--workbook-submission", str(pristine_lab("01")))
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "1 failed, 1 passed, 2 skipped" in proc.stdout
    assert "loss.item()" in proc.stdout and "hint:" in proc.stdout
