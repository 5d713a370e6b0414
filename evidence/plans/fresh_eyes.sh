#!/usr/bin/env bash
# The fresh-eyes timing of issue 19, written by a helper who had not seen the project's numbers (session 34; its one
# device call was spent on a placeholder, and no device time was left to run this): on the GPU machine, with .whl and
# .debs carried, `bash evidence/plans/fresh_eyes.sh` warms the compile cache of chapters 07 and 04, then times one
# `workbook check NN --variant solution` per chapter, appending chapter, exit code, seconds and the verdict line to
# $OUT/times.txt as it goes (a cut-short run keeps what it did).
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl; export PYTHONPATH=/tmp/site
python3 -m pip install -q --no-deps --no-build-isolation -e . >/dev/null 2>&1
mkdir -p /tmp/dw && for f in .debs/*.deb; do dpkg -x "$f" /tmp/dw; done
export LD_LIBRARY_PATH=/tmp/dw/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
T=$OUT/times.txt
{ nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; python3 -c 'import torch; print(torch.__version__)'
  date -u; echo "user=$(id -un)"; } >> "$T" 2>&1
W="python3 -m checker"
seconds() { python3 -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"; }
for c in 07 04; do
  s=$(date +%s.%N); $W check $c --variant solution > /tmp/w$c.log 2>&1; r=$?; e=$(date +%s.%N)
  tail -n 60 /tmp/w$c.log > "$OUT/warmup-$c.log"; echo "warmup $c rc=$r $(seconds "$s" "$e")" >> "$OUT/warmup.txt"
done
for c in 07 04 08 02 03 01 06 00 05; do
  s=$(date +%s.%N); $W check $c --variant solution > /tmp/c$c.log 2>&1; r=$?; e=$(date +%s.%N)
  tail -n 60 /tmp/c$c.log > "$OUT/check-$c.log"
  printf '%s\t%s\t%s\t%s\n' "$c" "$r" "$(seconds "$s" "$e")" "$(grep -E '^(PASSED|FAILED)' /tmp/c$c.log | tail -n 1)" >> "$T"
done
# A call brings back 8 files at most: keep times.txt and warmup.txt, and fold the logs into one archive.
(cd "$OUT" && tar -czf logs.tar.gz warmup-*.log check-*.log && rm -f warmup-*.log check-*.log)
