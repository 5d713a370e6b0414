#!/usr/bin/env bash
# `workbook watch 01` in tmux, as a learner uses it: it checks the lab as shipped (a failure), then the lab is
# saved fixed (the solution copied over it) and the verdict must flip to a pass and move on to chapter 02; Ctrl-C
# then stops it during a check. Writes what the terminal showed, with the seconds from the save to the pass, to
# docs/results/watch-01.md (or $1). Runs in a scratch clone of this checkout's last commit; needs tmux.
#
#   bash scripts/watch_demo.sh [OUT.md]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
OUT=${1:-$ROOT/docs/results/watch-01.md}
command -v tmux >/dev/null || { echo "watch_demo: needs tmux (Debian: apt-get install tmux)" >&2; exit 2; }
CLONE=$(mktemp -d /tmp/workbook-watch-XXXXXX)
SESSION=workbook-watch-$$
cleanup() { tmux kill-session -t "$SESSION" 2>/dev/null || true; rm -rf "$CLONE"; }
trap cleanup EXIT
git clone -q "$ROOT" "$CLONE/wb"
cd "$CLONE/wb"
COMMIT=$(git rev-parse --short=10 HEAD)
screen() { tmux capture-pane -p -S -500 -t "$SESSION"; }
wait_for() {  # wait_for TEXT SECONDS: until the terminal shows TEXT
  local end=$((SECONDS + $2))
  until screen | grep -qF -- "$1"; do
    [ $SECONDS -lt $end ] || { echo "watch_demo: '$1' did not appear within $2 s; the terminal:" >&2; screen >&2; exit 1; }
    sleep 0.2
  done
}
tmux new-session -d -s "$SESSION" -x 160 -y 50 \
  "cd $CLONE/wb && PYTHONPATH=$CLONE/wb WORKBOOK_ROOT=$CLONE/wb WORKBOOK_STATE_DIR=$CLONE/state python3 -m checker watch 01; echo \"exit status \$?\"; sleep 600"
wait_for "-- watching labs/01_item_syncs/train.py" 300
SAVED=$(date +%s.%N)
cp solutions/01_item_syncs/train.py labs/01_item_syncs/train.py
wait_for "01_item_syncs passed. Next: 02_pageable_copies" 300
PASSED=$(date +%s.%N)
wait_for "baseline run: chapters/02_pageable_copies/slow.py" 60
tmux send-keys -t "$SESSION" C-c
wait_for "exit status" 60
LEFT=$(pgrep -f "$CLONE/wb" | grep -v "^$$\$" | xargs -r ps -o pid=,args= -p | grep -v "tmux\|sleep 600" || true)
TORCH=$(python3 -c "import torch; print(torch.__version__)")
{
  echo "# \`workbook watch 01\` in tmux"
  echo
  echo "Written by \`scripts/watch_demo.sh\` on $(date -u +'%Y-%m-%d %H:%M') UTC: $(uname -sm), $(nproc) cores, no GPU"
  echo "used (the checks ran on the CPU), Python $(python3 -c 'import platform; print(platform.python_version())'), torch $TORCH, a clone of commit \`$COMMIT\`."
  echo
  echo "The lab as shipped failed; then the solution was copied over it (a save). From that save to the line"
  echo "\`01_item_syncs passed. Next: …\`: **$(printf '%.1f' "$(echo "$PASSED - $SAVED" | bc)") s** (the terminal read every 0.2 s; the check's own"
  echo "time is in its header line below). Ctrl-C during chapter 02's check: the last lines below;"
  echo "processes of the clone left running afterwards: ${LEFT:-none}."
  echo
  echo '```text'
  screen | sed -e 's/[[:space:]]*$//' | cat -s
  echo '```'
} > "$OUT"
echo "watch_demo: wrote $OUT"
