#!/bin/bash
# Session 64, after call 64c's checks on the GPU: chapter 00's solution, lab and two paced cheats with their traces
# kept, then each trace's idle shares (host and device: evidence/probes/idle_share_probe.py) to $OUT/idle.jsonl.
mkdir -p /tmp/k
for v in "--variant solution" "--variant lab" "--submission tests/redteam/cheats/beat_report_00" \
         "--submission tests/redteam/cheats/paced_report_00"; do
    d=/tmp/k/$(echo "$v" | tr -c 'a-z0-9\n' _)
    mkdir -p "$d"
    WORKBOOK_SCAN=0 timeout 60 python3 -m checker check 00 $v --device cuda --keep-traces "$d" --json > "$d.json" 2> "$d.err"
    echo "$v rc=$?"
    python3 - "$d.json" <<'P'
import json, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as err:
    print("  no verdict:", err); sys.exit()
for c in d["checks"]:
    print(" ", c["name"], c["status"], json.dumps(c.get("measured"))[:300])
P
done
python3 evidence/probes/idle_share_probe.py /tmp/k/*/ | tee "$OUT/idle.jsonl"
