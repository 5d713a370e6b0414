"""Which of chapter 07's tensors the reference solution trains differently from the slow script on a CPU, bit for bit.

Runs chapter 07's slow script and its solution on their own (the harness's known secrets, so both train the same
samples from the same start), with the solution's fused optimizer as [workload.cpu] sets it and forced on and off,
and prints, per run, every tensor of the final weights that differs from the slow script's and by how much.
Run it under ATEN_CPU_CAPABILITY=default|avx2|avx512 to see each of PyTorch's CPU kernel sets.

    python evidence/made-by/bitwise_07_cpu.py
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
CHAPTER = "07_capstone_ladder"

# In the script's process: keep the weights the window closes on (what the grader would receive).
DUMP = """
import runpy, sys, torch
from checker.candidate import session as harness
script, out = sys.argv[1:3]
close = harness.Session._close_window
def keep(self):
    close(self)
    torch.save({k: v.detach().clone() for k, v in self.model.state_dict().items()}, out)
harness.Session._close_window = keep
sys.argv = [script]
runpy.run_path(script, run_name="__main__")
"""


def weights(script: Path, out: Path) -> dict:
    subprocess.run([sys.executable, "-c", DUMP, str(script), str(out)], cwd=ROOT, check=True, capture_output=True)
    return torch.load(out)


def main() -> int:
    solution = (ROOT / "solutions" / CHAPTER / "train.py").read_text()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        scripts = {"solution as [workload.cpu] sets it": ROOT / "solutions" / CHAPTER / "train.py"}
        for fused in (True, False):
            path = tmp / f"fused_{fused}.py"
            path.write_text(re.sub(r"^FUSED_OPTIMIZER = .*$", f"FUSED_OPTIMIZER = {fused}", solution, flags=re.M))
            scripts[f"solution, fused optimizer forced {'on' if fused else 'off'}"] = path
        slow = weights(ROOT / "chapters" / CHAPTER / "slow.py", tmp / "slow.pt")
        print(f"torch {torch.__version__}, ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '(unset)')}; "
              f"{len(slow)} tensors")
        for label, script in scripts.items():
            other = weights(script, tmp / "other.pt")
            differ = {k: (slow[k].double() - other[k].double()).abs().max().item() for k in slow}
            differ = {k: v for k, v in differ.items() if v > 0}
            listed = ", ".join(f"{k} (max {v:.2g})" for k, v in differ.items()) or "none: bit for bit the same"
            print(f"  {label}: {len(differ)} tensors differ: {listed}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
