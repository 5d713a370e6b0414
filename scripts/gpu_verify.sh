#!/usr/bin/env bash
# Everything the workbook claims about GPUs, in one run on the GPU machine (the `device` tool).
#
#   STAGES="env sweep fixtures checks" bash scripts/gpu_verify.sh      # results under $OUT
#
# Stages (default: all but sweep):
#   env       GPU, driver, torch, nsys/ncu versions, CPU model, torch threads (FINGERPRINT="05 ...": those chapters'
#             workloads for one fixed seed, scripts/workload_fingerprint.py) -> $OUT/env.json
#   probe     chapter 02's loader, copies and model step timed apart -> $OUT/probe_02.jsonl
#   sweep     slow vs solution over workload settings (SWEEPS: ';'-separated sweep.py args) -> $OUT/sweep.jsonl
#   tables    the pages' measured tables: chapter 02's prefetcher (stretch) and chapter 03's p50/p90/max by worker
#             count -> $OUT/tables.tar.gz (unpack into docs/results/)
#   fixtures  the trace engine's fixture programs under torch.profiler and nsys -> $OUT/fixtures.tar.gz
#   diagnose  chapter 08's reference diagnosis on this GPU -> solutions/08_triage/answer.cuda.toml and $OUT
#   checks    `workbook check` for every chapter: solution, lab and slow, with torch.profiler and nsys,
#             RERUNS times each -> $OUT/checks.jsonl; the torch traces the checks read -> $OUT/traces.tar.gz.part-*;
#             PLAN may also name red-team cheats (cheat:<folder under tests/redteam>:<chapter>:<tool>)
#   ladder    each LADDERS chapter's [ladder] (default: 07): `workbook check NN --variant solution --only same_work
#             --ladder --ladder-trials LADDER_TRIALS` (default 1: every rung compiles anew, minutes each), the slow
#             script then the reference solution one lever at a time -> $OUT/ladder.tar.gz
#             (<chapter>-ladder-<h100|h200>.json and .md: unpack into docs/results/)
#   gradecheck scripts/grade_two_gpus.sh check (GRADE_CHAPTER, GRADE_CLASS_SIZE, GRADE_CHEATS) -> $OUT/grade_two_gpus.json
#   classcost scripts/class_cost.py (CLASS_COST: its chapters and options) on the first GPU -> $OUT/class-cost.md
#   summary   a table of it all -> $OUT/summary.md
# Needs: .whl/ (the nvtx wheel) and .debs/ (libdw1, libelf1 for nsys's importer), carried.
set -u
OUT=${OUT:-/tmp/workbook-out}
mkdir -p "$OUT"
STAGES=${STAGES:-"env fixtures checks summary"}
CHAPTERS=${CHAPTERS:-$(ls chapters | grep -E '^[0-9]{2}_' | tr '\n' ' ')}
RERUNS=${RERUNS:-1}
export PYTHONUNBUFFERED=1 WORKBOOK_PROGRESS=1  # each check's stderr says where each run's seconds went
log() { echo "[$(date +%H:%M:%S)] $*"; }

# scratch (traces, reports, each check's output): WORK_TMP, so that lanes of scripts/gpu_lanes.sh stay apart
W=${WORK_TMP:-/tmp}; mkdir -p "$W"

# -- setup: nvtx from the carried wheel, the project itself, nsys's missing libdw (SKIP_SETUP=1: done already,
#    by scripts/gpu_lanes.sh before it starts its lanes) ----------------------------------------------------
if [ "${SKIP_SETUP:-0}" != 1 ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || { echo "pip install -e . failed"; exit 1; }
  mkdir -p /tmp/dw && for f in .debs/*.deb; do dpkg -x "$f" /tmp/dw; done
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site
export LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
export WORKBOOK_NSYS=${WORKBOOK_NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
NSYS=$WORKBOOK_NSYS
# A call may land on either GPU kind: where it is an H200 and PLAN_H200 is set, that plan (and STAGES_H200, if
# set) runs instead of PLAN (and STAGES)
if [ -n "${PLAN_H200:-}${STAGES_H200:-}" ] && python3 -c "import sys, torch; sys.exit('H200' not in torch.cuda.get_device_name(0))"; then
  log "an H200: running PLAN_H200"; PLAN=$PLAN_H200; STAGES=${STAGES_H200:-$STAGES}
fi
has() { [[ " $STAGES " == *" $1 "* ]]; }

if has env; then
  log "env"
  python3 - <<'PY' > "$OUT/env.json"
import json, subprocess, datetime, torch, os, sys
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip()
def fingerprint(chapter):
    try:
        done = subprocess.run([sys.executable, "scripts/workload_fingerprint.py", chapter], capture_output=True,
                              text=True, timeout=180)
        return json.loads(done.stdout) if done.returncode == 0 else done.stderr.strip()[-300:]
    except Exception as err:
        return f"unavailable: {err}"
def version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[-1]
    except Exception as err:
        return f"unavailable: {err}"
print(json.dumps({
    "gpu": torch.cuda.get_device_name(0), "nvidia_smi": smi,
    # where scripts/gpu_lanes.sh ran this beside other lanes: its GPU, its CPUs and how many lanes shared the host
    "lane": {"cuda_visible_devices": os.environ["CUDA_VISIBLE_DEVICES"], "cpus": len(os.sched_getaffinity(0)),
             "lanes": int(os.environ["GPU_LANES"])} if os.environ.get("GPU_LANES") else None,
    "driver": smi.split(", ")[1] if smi else None,
    "torch": torch.__version__, "cuda": torch.version.cuda, "cpu_count": os.cpu_count(),
    "nsys": version([os.environ["WORKBOOK_NSYS"], "--version"]), "ncu": version(["ncu", "--version"]),
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "cpu_model": next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), None),
    "torch_threads": torch.get_num_threads(),
    # FINGERPRINT="05 ..." (a plan's): each chapter's workload for one fixed seed (data, initial weights, their
    # held-out loss); lanes or machines that differ here built different experiments from the same secret
    "fingerprints": {c: fingerprint(c) for c in os.environ.get("FINGERPRINT", "").split()},
}, indent=2))
PY
  cat "$OUT/env.json"; df -h /dev/shm | tail -n 1
fi

if has probe; then
  log "probe 02: loader, copies and model step timed apart"
  python3 evidence/probes/probe_02.py --out "$OUT/probe_02.jsonl"
fi

if has sweep; then
  # SWEEPS: sweep.py argument lists separated by ';', run in order until DEADLINE (seconds of this script).
  IFS=';' read -ra sweeps <<< "${SWEEPS:-01 --trials 2}"
  for args in "${sweeps[@]}"; do
    if [ "$SECONDS" -ge "${DEADLINE:-100000}" ]; then log "deadline: skipping sweep $args"; continue; fi
    log "sweep $args"
    # shellcheck disable=SC2086
    python3 scripts/sweep.py $args --tag "$args" 2>&1 | tee -a "$OUT/sweep.jsonl"
  done
fi

if has tables; then
  log "tables: chapter 02 prefetcher, chapter 03 step times by worker count"
  TB=$W/tables; rm -rf $TB; mkdir -p $TB
  python3 scripts/stretch_results.py --device cuda --trials "${TABLE_TRIALS:-2}" --out $TB/02_pageable_copies-prefetch
  if [ "$SECONDS" -lt "${DEADLINE:-100000}" ]; then
    python3 scripts/jitter_results.py --device cuda --workers "${JITTER_WORKERS:-2,4,8,12}" \
      --trials "${TABLE_TRIALS:-2}" --out $TB/03_dataloader_workers-jitter
  fi
  ls -la $TB; cat $TB/*.md; tar -C $TB -czf "$OUT/tables.tar.gz" .
fi

if has fixtures; then
  log "fixtures"
  F=$W/fixtures; rm -rf $F; mkdir -p $F
  for program in pageable_item pinned_clean mask_any; do
    mkdir -p $F/$program
    python3 scripts/trace_fixture_programs.py --program $program --steps 7 --torch-trace $F/$program/kineto.json.gz
    "$NSYS" profile -t cuda,nvtx,osrt --capture-range=cudaProfilerApi --capture-range-end=stop --force-overwrite=true \
      -o $F/$program/nsys python3 scripts/trace_fixture_programs.py --program $program --steps 7 > $F/$program/nsys.log 2>&1
    "$NSYS" export --type sqlite --force-overwrite=true -o $F/$program/nsys.sqlite $F/$program/nsys.nsys-rep >> $F/$program/nsys.log 2>&1
    gzip -f $F/$program/nsys.sqlite; rm -f $F/$program/nsys.nsys-rep
    ls -la $F/$program
  done
  tar -C $F -czf "$OUT/fixtures.tar.gz" .
fi

if has raw; then
  log "raw traces of chapter 01 (slow) for the trace engine"
  R=$W/raw; rm -rf $R; mkdir -p $R
  python3 -m checker.launch --script chapters/01_item_syncs/slow.py --result $R/torch.result.json --trace torch \
    --trace-out $R/ch01-slow-kineto.json.gz -- --steps 70
  "$NSYS" profile -t cuda,nvtx,osrt --capture-range=cudaProfilerApi --capture-range-end=stop --python-backtrace=cuda \
    --force-overwrite=true -o $R/ch01-slow python3 chapters/01_item_syncs/slow.py --steps 70 > $R/nsys.log 2>&1
  "$NSYS" export --type sqlite --force-overwrite=true -o $R/ch01-slow.sqlite $R/ch01-slow.nsys-rep >> $R/nsys.log 2>&1
  gzip -f $R/ch01-slow.sqlite; rm -f $R/*.nsys-rep; ls -la $R; tail -n 5 $R/nsys.log
  tar -C $R -czf "$OUT/raw.tar.gz" .
fi

if has diagnose; then
  # chapter 08's reference diagnosis measured on this GPU (its shares are this device's, not a CPU's): written
  # where the grader reads a per-device answer (solutions/08_triage/answer.cuda.toml) so that the checks after
  # it grade it, and copied to $OUT to be committed
  log "diagnose 08 on cuda"
  python3 solutions/08_triage/diagnose.py --device cuda --out solutions/08_triage/answer.cuda.toml \
    && cp solutions/08_triage/answer.cuda.toml "$OUT/answer.cuda.toml"
fi

if has checks; then
  # PLAN: items run in order until DEADLINE (seconds of this script), so that a cut-short run still has the
  # most important verdicts. Items: check:<chapter>:<variant>:<tool>[:<check,check>] (the optional last
  # field is passed as --only).
  # Items' tool may be torch+ncu or nsys+ncu (adds --with-ncu). Each check keeps the torch traces it read
  # (--keep-traces): they go to $OUT/traces.tar.gz.part-* for the docs' timelines.
  # Default: for every chapter, RERUNS x (solution, lab) x (torch, nsys) checks.
  T=$W/traces; rm -rf $T; mkdir -p $T
  DEADLINE=${DEADLINE:-100000}
  if [ -z "${PLAN:-}" ]; then
    PLAN=""
    for chapter in $CHAPTERS; do
      for rerun in $(seq 1 "$RERUNS"); do
        for tool in ${TOOLS:-torch nsys}; do
          for variant in solution lab; do PLAN="$PLAN check:$chapter:$variant:$tool"; done
        done
      done
    done
  fi
  declare -A done_count
  for item in $PLAN; do
    # an item may end in @NAME=VALUE: that one check runs with NAME=VALUE in its environment (an A/B of a switch)
    assign=""
    if [[ "$item" == *@* ]]; then assign=${item#*@}; item=${item%%@*}; fi
    # @COLD=1: the check starts with no compile cache (as a learner's first check of a script does): its wall time
    # is the chapter's check_wall_s_cold in the results files, beside the first check of each call
    cold=0
    if [ "$assign" = COLD=1 ]; then cold=1; assign=""; rm -rf .workbook/compile-cache; fi  # the store: each run is filled from it
    IFS=: read -r kind chapter variant tool only <<< "$item"
    target="--variant $variant"
    if [ "$kind" = cheat ]; then
      # cheat:<folder under tests/redteam>:<chapter>:<tool>[:only]: graded as a submission, the scan off, so that
      # the run's own defences are what must reject it (tests/redteam/gpu.toml says how)
      IFS=: read -r kind path chapter tool only <<< "$item"
      variant="cheat/$path"; target="--submission tests/redteam/$path"
    fi
    if [ "$SECONDS" -ge "$DEADLINE" ]; then log "deadline: skipping $item"; continue; fi
    # tool "torch+ncu" or "nsys+ncu": also the Nsight Compute checks, reports kept under $T/ncu-<chapter>-<variant>
    extra=""
    if [[ "$tool" == *+ncu ]]; then
      tool=${tool%+ncu}; extra="--with-ncu"; export WORKBOOK_NCU_OUT=$T/ncu-${chapter}-${variant}
    fi
    [ -n "$only" ] && extra="$extra --only $only"
    key="$chapter:$variant:$tool$extra$assign"; done_count[$key]=$(( ${done_count[$key]:-0} + 1 )); rerun=${done_count[$key]}
    log "check $chapter $variant $tool $extra (run $rerun)"
    keep=$W/keep; rm -rf $keep
    start=$(date +%s.%N)
    # never past HARD_STOP (seconds of this script): what ran before it still comes back
    scan=1; [ "$kind" = cheat ] && scan=0
    env $assign WORKBOOK_SCAN=$scan timeout $(( ${HARD_STOP:-100000} - SECONDS )) \
      python3 -m checker check "$chapter" $target --trace-tool $tool $extra --keep-traces $keep --json > $W/check.json 2> $W/check.err
    code=$?
    grep -E '^  \[' $W/check.err | cut -c1-200
    wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")
    unset WORKBOOK_NCU_OUT
    # the traces the first run of each check read (candidate, and the slow baseline where a check used it), for the
    # pages' timelines: torch.profiler's .json.gz, nsys's exported .sqlite; <chapter>-<variant>-<tool><suffix>
    if [ "$rerun" = 1 ]; then
      safe=${variant//\//_}  # a cheat's variant names its folder: cheat/gpu/name -> cheat_gpu_name
      for f in $keep/*-candidate-$tool*; do [ -e "$f" ] && mv "$f" "$T/${chapter}-${safe}-$tool${f##*-$tool}"; done
      for f in $keep/*-baseline-$tool*; do
        slow="$T/${chapter}-slow-$tool${f##*-$tool}"; [ -e "$f" ] && [ ! -e "$slow" ] && mv "$f" "$slow"
      done
      # chapter 08: each mystery job's trace (<id>-job-<job>-torch.json.gz), for the page's timelines
      for f in $keep/*-job-*-torch.json.gz; do [ -e "$f" ] && mv "$f" "$T/${safe}-$(basename "$f")"; done
    fi
    python3 - "$chapter" "$variant" "$tool" "$rerun" "$code" "$wall" "$extra" "$assign" "$W" "$cold" <<'PY' >> "$OUT/checks.jsonl"
import json, sys
chapter, variant, tool, rerun, code, wall, extra, assign, scratch, cold = sys.argv[1:]
try:
    report = json.load(open(f"{scratch}/check.json"))
except Exception:
    report = {"error": open(f"{scratch}/check.err").read()[-2000:]}
report.update(chapter=report.get("chapter") or chapter, variant=variant, trace_tool=tool, with_ncu="--with-ncu" in extra,
              only=extra.split("--only ")[1] if "--only " in extra else None, rerun=int(rerun), exit_code=int(code),
              wall_s_outer=float(wall), env_vars=dict([assign.split("=", 1)]) if assign else {}, cold=cold == "1")
print(json.dumps(report))
PY
    tail -n 1 "$OUT/checks.jsonl" | python3 -c "
import json,sys; r=json.loads(sys.stdin.read())
print('   exit', r['exit_code'], 'wall', r['wall_s_outer'], ' '.join(f\"{c['name']}={c['status']}:{json.dumps(c.get('measured',{}))[:160]}\" for c in r.get('checks', [])) or r.get('error','')[-600:])"
  done
  # in pieces under the 16 MB a returned file may have: cat traces.tar.gz.part-* | tar xz
  tar -C $T -czf - . 2>/dev/null | split -b 15M - "$OUT/traces.tar.gz.part-"
fi

if has ladder; then
  L=$W/ladder; rm -rf $L; mkdir -p $L
  kind=$(python3 -c "import torch; n = torch.cuda.get_device_name(0); print('h200' if 'H200' in n else 'h100' if 'H100' in n else 'gpu')")
  for chapter in ${LADDERS:-07}; do
    if [ "$SECONDS" -ge "${DEADLINE:-100000}" ]; then log "deadline: skipping the ladder of $chapter"; continue; fi
    id=$(python3 -c "from checker.base.chapters import get_chapter; print(get_chapter('$chapter').id)")
    log "ladder $id on $kind"
    timeout $(( ${HARD_STOP:-100000} - SECONDS )) python3 -m checker check "$chapter" --variant solution --only same_work \
      --ladder --ladder-trials "${LADDER_TRIALS:-1}" --ladder-out "$L/$id-ladder-$kind" 2>&1 | tail -n 20
  done
  ls -la $L; tar -C $L -czf "$OUT/ladder.tar.gz" .
fi

if has classcost; then
  # CLASS_COST: scripts/class_cost.py's chapters and options (default "01 --students 4"): seconds per student of
  # `workbook grade`, the slow script beside every run against shared, on this machine's first GPU alone
  log "class cost: ${CLASS_COST:-01 --students 4}"
  CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-0} WORKBOOK_PROGRESS=0 timeout $(( ${HARD_STOP:-100000} - SECONDS )) \
    python3 scripts/class_cost.py ${CLASS_COST:-01 --students 4} --device cuda --out "$OUT/class-cost.md" 2>&1 | tail -n 20
fi

if has gradecheck; then
  # scripts/grade_two_gpus.sh's check stage: every student of its class (GRADE_CHAPTER, GRADE_CLASS_SIZE,
  # GRADE_CHEATS) through `workbook check --submission` on the first GPU -> $OUT/grade_two_gpus.json
  log "grade check: chapter ${GRADE_CHAPTER:-01}, ${GRADE_CLASS_SIZE:-8} students"
  CHAPTER=${GRADE_CHAPTER:-01} CLASS_SIZE=${GRADE_CLASS_SIZE:-8} CHEATS=${GRADE_CHEATS:-} WORK=$W/grade OUT=$OUT \
    timeout $(( ${HARD_STOP:-100000} - SECONDS )) bash scripts/grade_two_gpus.sh check 2>&1 | tail -n 30
fi

if has summary; then
  python3 scripts/summarize_gpu_run.py "$OUT" > "$OUT/summary.md" 2>&1; cat "$OUT/summary.md"
  [ -d "$OUT/results" ] && tar -C "$OUT" -czf "$OUT/results.tar.gz" results && rm -rf "$OUT/results"
fi
ls -la "$OUT"
