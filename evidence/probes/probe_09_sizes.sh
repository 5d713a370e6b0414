#!/usr/bin/env bash
# Chapter 09 sizes on two GPUs: the slow script, the lab-less fixes one at a time (the solution), over a few
# workload settings, each run standalone under torchrun (the session's own clock: a probe, not a grade).
#   CONFIGS="global_batch=512,accum=4 global_batch=4096,accum=4" bash evidence/probes/probe_09_sizes.sh > $OUT/probe.jsonl
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
STEPS=${STEPS:-60}
for cfg in ${CONFIGS:-"global_batch=512,accum=4"}; do
  sets=""; IFS=',' read -ra kv <<< "$cfg"; for s in "${kv[@]}"; do sets="$sets --set $s"; done
  for script in chapters/09_data_parallel/slow.py solutions/09_data_parallel/train.py; do
    line=$(timeout 240 torchrun --standalone --nproc-per-node 2 "$script" --steps "$STEPS" $sets 2>&1 | grep -E 'samples/s' | head -1)
    python3 - "$cfg" "$script" "$line" <<'PY'
import json, re, sys
cfg, script, line = sys.argv[1:]
m = re.search(r"in ([0-9.]+) s .*steps (\d+)\.\.(\d+)", line)
row = {"cfg": cfg, "script": script, "line": line}
if m:
    seconds, first, last = float(m.group(1)), int(m.group(2)), int(m.group(3))
    row.update(seconds=seconds, steps=last - first + 1, ms_per_step=round(1000 * seconds / (last - first + 1), 2))
print(json.dumps(row), flush=True)
PY
  done
done
