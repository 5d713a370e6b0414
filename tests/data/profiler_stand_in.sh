#!/bin/sh
# A stand-in for a profiler that starts the run's command as its child and waits for it, as nsys and ncu do:
# tests/test_profiled_runs.py. Called as `profiler_stand_in.sh -o REPORT COMMAND...`; it writes an empty report.
report=$2
shift 2
"$@"
code=$?
: > "$report.ncu-rep"
exit $code
