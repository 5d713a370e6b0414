"""docs/results/trust-gpu.md is rendered from the raw rows of the GPU verification, never typed."""

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_gpu_trust_results_are_rendered_from_their_rows():
    proc = subprocess.run(["bash", "evidence/made-by/render_trust_results.sh"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == (ROOT / "docs" / "results" / "trust-gpu.md").read_text()
    # every check of the final design ended as it must; the rows before a fix are shown apart
    assert "24 of 24 checks ended as they must" in proc.stdout


def test_the_chapter_05_probe_tables_are_rendered_from_their_rows():
    """docs/results/05_pointwise_chains-heldout-probe.md: each table is evidence/probes/probe_heldout_05.py --summarize of the
    raw rows it names, so the numbers that moved chapter 05's learning rate are never typed."""
    history = "evidence/history/2026-11-27-"
    page = (ROOT / "docs" / "results" / "05_pointwise_chains-heldout-probe.md").read_text()
    for files, env in (([f"{history}h200-session39-call4-probe05.jsonl", f"{history}h200-session39-call5-probe05-lr.jsonl"],
                        f"{history}h200-session39-call5-probe05-lr.env.json"),
                       ([f"{history}cpu-session39-probe05-proxy.jsonl"], f"{history}cpu-session39-probe05-proxy.env.json"),
                       ([f"{history}h100-session40-call2-probe05.jsonl"], f"{history}h100-session40-call2-probe05.env.json"),
                       ([f"{history}h200-session40-call3-probe05.jsonl"], f"{history}h200-session40-call3-probe05.env.json")):
        proc = subprocess.run(["python3", "evidence/probes/probe_heldout_05.py", "--summarize", *files, "--env", env], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout in page
