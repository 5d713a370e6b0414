#!/usr/bin/env bash
# Chapter 09 on two GPUs: `workbook check 09` of the reference solution and the unmodified lab, each job on both
# GPUs (NCCL), with every rank's traces kept for the page. Run on an nvidia-h100-x2 or nvidia-h200-x2 machine.
#
#   RUNS="solution solution solution lab lab" bash scripts/gpu_ddp.sh      # results under $OUT
#
# RUNS: the variants to check, in order (a variant named twice is checked twice; rerun numbers count per variant).
# HARD_STOP: seconds after which no further check starts (default 540: under the device's 10 minutes a call).
# Writes:
#   $OUT/env.json            GPUs, driver, torch, NCCL, date, the NVLink-multicast settings the ranks ran with
#   $OUT/checks.jsonl        one `workbook check --json` report per check, with variant, rerun, exit code, wall
#   $OUT/traces.tar.gz       the first check of each variant: every rank's torch.profiler trace the checks read
#                            (09_data_parallel-<variant>-rank<r>-torch.json.gz, the slow baseline's too)
#   $OUT/report-<variant>.txt  `workbook report` of those traces, both ranks side by side
# Needs: .whl/ (the nvtx wheel), carried; nsys is not used (the rank checks read torch.profiler's traces).
set -u
OUT=${OUT:-/tmp/workbook-out}
mkdir -p "$OUT"
RUNS=${RUNS:-"solution solution solution lab lab"}
HARD_STOP=${HARD_STOP:-540}
export PYTHONUNBUFFERED=1 WORKBOOK_PROGRESS=1
# NVLink multicast off (the ranks get these from checker/grader/ranks.py too; here for anything else NCCL starts)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
log() { echo "[$(date +%H:%M:%S)] $*"; }
W=${WORK_TMP:-/tmp/ddp09}; rm -rf "$W"; mkdir -p "$W/traces"

if [ "${SKIP_SETUP:-0}" != 1 ]; then
  if ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  fi
  python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1 || { echo "pip install -e . failed"; exit 1; }
fi
[ -d /tmp/site ] && export PYTHONPATH=/tmp/site

python3 - <<'PY' > "$OUT/env.json"
import datetime, json, os, subprocess, torch
smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                     capture_output=True, text=True).stdout.strip().splitlines()
topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True).stdout.strip()
print(json.dumps({
    "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    "gpus": smi, "gpu_count": torch.cuda.device_count(),
    "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
    "driver": smi[0].split(", ")[1] if smi else None, "torch": torch.__version__, "cuda": torch.version.cuda,
    "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available() else None,
    "topology": topo, "cpu_count": os.cpu_count(),
    "nvls": {k: os.environ.get(k) for k in ("NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")},
}, indent=1))
PY
log "env: $(python3 -c "import json; e=json.load(open('$OUT/env.json')); print(e['gpu_count'], 'x', e['gpu'], 'driver', e['driver'], 'torch', e['torch'])")"

declare -A count
for variant in $RUNS; do
  if [ "$SECONDS" -ge "$HARD_STOP" ]; then log "HARD_STOP: not starting $variant"; continue; fi
  count[$variant]=$(( ${count[$variant]:-0} + 1 )); rerun=${count[$variant]}
  keep=$W/keep; rm -rf "$keep"
  log "check 09 $variant (run $rerun)"
  start=$(date +%s.%N)
  timeout $(( 590 - SECONDS )) python3 -m checker check 09 --variant "$variant" --device cuda --json \
    --keep-traces "$keep" > "$W/check.json" 2> "$W/check.err"
  code=$?
  wall=$(python3 -c "import time; print(round(time.time() - $start, 1))")
  grep -E '^  \[' "$W/check.err" | cut -c1-200
  if [ "$rerun" = 1 ]; then  # every rank's traces, for the page's per-rank timelines and report
    for f in "$keep"/*; do
      [ -e "$f" ] || continue
      name=$(basename "$f"); role=${name#09_data_parallel-}; role=${role%%-torch*}  # candidate, candidate.rank1, ...
      rank=0; [[ "$role" == *.rank* ]] && rank=${role##*.rank}
      who=$variant; [[ "$role" == baseline* ]] && who=slow
      cp "$f" "$W/traces/09_data_parallel-$who-rank$rank-torch.json.gz"
    done
    r0=$W/traces/09_data_parallel-$variant-rank0-torch.json.gz; r1=$W/traces/09_data_parallel-$variant-rank1-torch.json.gz
    [ -e "$r0" ] && [ -e "$r1" ] && python3 -m checker report "$r0" --ranks "$r1" --chapter 09 > "$OUT/report-$variant.txt" 2>&1
  fi
  python3 - "$variant" "$rerun" "$code" "$wall" "$W" <<'PY' >> "$OUT/checks.jsonl"
import json, sys
variant, rerun, code, wall, scratch = sys.argv[1:]
try:
    report = json.load(open(f"{scratch}/check.json"))
except Exception:
    report = {"error": open(f"{scratch}/check.err").read()[-3000:]}
report.update(chapter=report.get("chapter") or "09_data_parallel", variant=variant, trace_tool="torch", with_ncu=False,
              only=None, rerun=int(rerun), exit_code=int(code), wall_s_outer=float(wall), env_vars={}, cold=False)
print(json.dumps(report))
PY
  tail -n 1 "$OUT/checks.jsonl" | python3 -c "
import json,sys; r=json.loads(sys.stdin.read())
print('   exit', r['exit_code'], 'wall', r['wall_s_outer'], ' '.join(f\"{c['name']}={c['status']}:{json.dumps(c.get('measured',{}))[:200]}\" for c in r.get('checks', [])) or r.get('error','')[-900:])"
done
tar -C "$W/traces" -czf "$OUT/traces.tar.gz" . 2>/dev/null
log "done: $(wc -l < "$OUT/checks.jsonl") check(s) in $OUT/checks.jsonl"
