#!/usr/bin/env bash
# docs/results/trust-gpu.md from the raw rows of the H100 verification of 2026-11-23 (tests compare the two).
set -euo pipefail
cd "$(dirname "$0")/../.."
H=evidence/history/2026-11-23-h100-trust
python3 evidence/made-by/summarize_trust_run.py $H-{1,2,3,4,5,6,7,8}.jsonl --env $H-1.env.json \
  --before-fix "2026-11-23-h100-trust-1.jsonl:2=a run in its own network namespace had its loopback down, and nsys needs it (checker/sandbox.py brings it up)" \
  --before-fix "2026-11-23-h100-trust-2.jsonl:2=cuDNN's benchmark mode picked algorithms by timing, so honest weights differed; chapters 02/03 use its heuristics since" \
  --before-fix "2026-11-23-h100-trust-2.jsonl:3=the same cuDNN benchmark mode" \
  --before-fix "2026-11-23-h100-trust-2.jsonl:4=not a fix: the verification script's own deadline stopped the check as it ended, after it had printed this report"
