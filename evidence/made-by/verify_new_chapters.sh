#!/usr/bin/env bash
# GPU verification of chapters 00 (measuring right) and 06 (hidden syncs), on the GPU machine (the `device`
# tool), through scripts/gpu_verify.sh: the same set-up (the carried nvtx wheel and nsys's libdw), the same rows
# in $OUT/checks.jsonl, the same summary. Results come back under $OUT.
#
#   bash evidence/made-by/verify_new_chapters.sh                  # sizing sweep of 06, then the checks, then the summary
#   STAGES="env checks summary" bash evidence/made-by/verify_new_chapters.sh   # the checks alone
#
# What it runs, in this order (a cut-short session keeps the most important verdicts):
#   1. chapter 06's solution: 3 x `workbook check --trace-tool torch`, 1 x `--trace-tool nsys` (the issue asks
#      for the threshold met in every run of at least 3, and the syncs gone in both trace formats);
#   2. chapter 06's lab: 1 x torch, same_work and host_syncs only (the lab fails host_syncs, each sync named);
#   3. chapter 00's lab and solution, torch: the lab's report is off by the factor mean_step_report measures
#      (measured.ratio), the solution's agrees;
#   4. with time left: 06's lab with nsys, 00's solution with nsys.
# Before the checks (stage sweep, unless STAGES says otherwise), a short sweep of chapter 06's slow script
# against its solution over the batch size: chapter.toml's cuda sizes and the throughput threshold (1.15) are
# placeholders until these rows exist.
#
# Then, on this machine: the rows build docs/results/<id>.json and .md (scripts/summarize_gpu_run.py), the
# threshold in chapters/06_hidden_syncs/chapter.toml is set below the solution's worst measured trial, and
# the tolerances of chapter 00's checks (threshold.cuda, placeholders 0.1) from the solution's measured ratios.
set -u
OUT=${OUT:-/tmp/workbook-out}
mkdir -p "$OUT"
export OUT
export STAGES=${STAGES:-"env sweep checks summary"}
export SWEEPS=${SWEEPS:-"06_hidden_syncs --trials 1 --steps 120 --set batch_size=32,64,128 --json $OUT/sweep-06.json"}
export DEADLINE=${DEADLINE:-1500}   # seconds of this script: no new item starts after it
export HARD_STOP=${HARD_STOP:-1700}  # an item running then is stopped
S06=06_hidden_syncs
S00=00_measuring_right
export PLAN=${PLAN:-"check:$S06:solution:torch check:$S06:solution:torch check:$S06:solution:torch \
check:$S06:solution:nsys check:$S06:lab:torch:same_work,host_syncs check:$S00:lab:torch check:$S00:solution:torch \
check:$S06:lab:nsys:host_syncs check:$S00:solution:nsys"}
exec bash "$(dirname "$0")/../../scripts/gpu_verify.sh"
