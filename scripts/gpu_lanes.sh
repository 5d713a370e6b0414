#!/usr/bin/env bash
# Several device plans at once on a machine with several GPUs: one lane per GPU, each lane a
# scripts/gpu_verify.sh run of one plan (evidence/plans/<name>.env) on its own GPU and its own contiguous share of
# the CPUs, with its own scratch folder, so that a four-GPU call gives the verdicts of four one-GPU calls (not
# their timings alone: a check timed beside others is not a check timed alone).
#
#   LANES="call1 call2 call3 call4" OUT=$OUT bash scripts/gpu_lanes.sh
#
# Lane i runs with CUDA_VISIBLE_DEVICES=i under `taskset` (CPUs i*n/k .. (i+1)*n/k - 1 of n, for k lanes), writes
# to lane<i>-<name>/ and logs to lane<i>-<name>.log, packed at the end into $OUT/lanes.tar.gz (a device call
# brings back 8 files at most) beside each lane's traces ($OUT/lane<i>-traces.tar.gz.part-*). Each lane's env.json records its GPU, its CPU
# count and the number of lanes: a check timed beside three others is not a check timed alone, and its results
# file says so. A lane named "-" is left idle. The plans' DEADLINE and HARD_STOP count from this script's start.
# Needs what gpu_verify.sh needs (.whl/ and .debs/ carried).
set -u
OUT=${OUT:-/tmp/workbook-out}
PLANS=${PLANS:-evidence/plans}  # where the plans are (a test points it and LANE_TMP elsewhere)
LANE_TMP=${LANE_TMP:-/tmp}     # each lane's scratch is $LANE_TMP/lane<i>
read -ra lanes <<< "${LANES:?name one plan per GPU, as LANES=\"call1 call2\"}"
gpus=$(nvidia-smi -L | wc -l)
if [ "${#lanes[@]}" -gt "$gpus" ]; then
  echo "gpu_lanes.sh: ${#lanes[@]} lanes but $gpus GPUs on this machine"; exit 2
fi
for name in "${lanes[@]}"; do
  [ "$name" = - ] || [ -f "$PLANS/$name.env" ] || { echo "gpu_lanes.sh: no plan $PLANS/$name.env"; exit 2; }
done
mkdir -p "$OUT"

# setup once, for every lane (gpu_verify.sh with no stage installs and exits)
STAGES=none OUT="$OUT/setup" bash scripts/gpu_verify.sh > "$OUT/setup.log" 2>&1 || { cat "$OUT/setup.log"; exit 1; }
rm -rf "$OUT/setup"

cpus=$(nproc); share=$(( cpus / ${#lanes[@]} )); started=$SECONDS
[ "$share" -ge 1 ] || share=1  # fewer CPUs than lanes: lanes share them (first and last wrap below)
for i in "${!lanes[@]}"; do
  name=${lanes[$i]}; [ "$name" = - ] && continue
  first=$(( i * share % cpus )); last=$(( first + share - 1 ))
  scratch=$LANE_TMP/lane$i; rm -rf "$scratch"; mkdir -p -m 1777 "$scratch"
  (
    set -a; . "$PLANS/$name.env"; set +a
    # the plan's clock starts with its lane, this script's a little earlier
    DEADLINE=$(( ${DEADLINE:-100000} - started )); HARD_STOP=$(( ${HARD_STOP:-100000} - started ))
    export DEADLINE HARD_STOP SKIP_SETUP=1 GPU_LANES=${#lanes[@]} CUDA_VISIBLE_DEVICES=$i TMPDIR=$scratch \
      WORK_TMP=$scratch OUT="$OUT/lane$i-$name"
    exec taskset -c "$first-$last" bash scripts/gpu_verify.sh
  ) > "$OUT/lane$i-$name.log" 2>&1 &
  echo "lane $i: $name on GPU $i, CPUs $first-$last"
done
wait
# at most 8 files come back from a device call: each lane's traces as they are, all else in one archive
for i in "${!lanes[@]}"; do
  for f in "$OUT/lane$i-${lanes[$i]}"/traces.tar.gz.part-*; do [ -e "$f" ] && mv "$f" "$OUT/lane$i-$(basename "$f")"; done
done
tar -C "$OUT" -czf "$LANE_TMP/lanes.tar.gz" --exclude='lane*-traces.tar.gz.part-*' . && \
  find "$OUT" -mindepth 1 -maxdepth 1 ! -name 'lane*-traces.tar.gz.part-*' -exec rm -rf {} + && mv "$LANE_TMP/lanes.tar.gz" "$OUT/"
ls -la "$OUT"
for i in "${!lanes[@]}"; do
  name=${lanes[$i]}; [ "$name" = - ] && continue
  echo "== lane $i: $name"; tar -xzOf "$OUT/lanes.tar.gz" "./lane$i-$name.log" | grep -E '^\[|^   exit|^\|' | cut -c1-240
done
