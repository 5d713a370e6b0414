"""Damaged and hostile traces, each made from a real committed trace, and what `workbook report` must do.

Issue 13 lists the inputs that once ended in a traceback, a hang, unbounded cost, a wrong refusal or a
silent wrong number. Each is a Case here: ``make(folder)`` writes the damaged input and returns the
arguments of `workbook report`; ``expect`` is either REFUSED (exit 2, one line naming the file and what is
wrong, containing ``says``) or WARNED (exit 0, a warning containing ``says``, and the summary numbers in
``numbers`` still right). tests/trace/test_trace_damage.py runs every case; run this file to rewrite the
table in docs/results/trace-damage-cases.md from real runs (each case in a fresh process, with its wall
time and peak memory), adding the 2 GB string the tests leave out for time:

    PYTHONPATH=. python tests/trace/damage_cases.py --write docs/results/trace-damage-cases.md
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from trace_helpers import ROOT, cpu_trace_path, gpu_trace_path  # noqa: E402

REFUSED, WARNED = "refused", "warned"
CPU_KINETO = cpu_trace_path("pageable_item")      # 7 steps, 7 host syncs (one .item() per step)
GPU_KINETO = gpu_trace_path("pageable_item", "kineto")  # 7 steps, 21 host syncs, 14 pageable copies
GPU_NSYS = gpu_trace_path("pageable_item", "nsys")
CPU_NUMBERS = {"steps": 7, "host_syncs_in_steps": 7}
GPU_NUMBERS = {"steps": 7, "host_syncs_in_steps": 21, "pageable_h2d_copies": 14}


@dataclass
class Case:
    id: str
    seen: str  # what the issue saw
    make: Callable[[Path], list[str]]
    expect: str
    says: str
    numbers: dict = field(default_factory=dict)
    slow: bool = False  # left out of the tests (the results table runs it)
    skip: Callable[[], str | None] = lambda: None


# ---- helpers that damage copies of the real traces --------------------------------------------------
def kineto_doc(path: Path = CPU_KINETO) -> dict:
    with gzip.open(path, "rt") as fh:
        return json.load(fh)


def write_doc(doc: dict, path: Path, replace: dict[str, str] | None = None, bom: bool = False) -> Path:
    text = json.dumps(doc)
    for placeholder, raw in (replace or {}).items():
        text = text.replace(json.dumps(placeholder), raw)
    data = (b"\xef\xbb\xbf" if bom else b"") + text.encode()
    if path.suffix == ".gz":
        with gzip.open(path, "wb", compresslevel=1) as fh:
            fh.write(data)
    else:
        path.write_bytes(data)
    return path


def timed(doc: dict) -> list[dict]:
    return [e for e in doc["traceEvents"] if e.get("ph") == "X"]


def first_op(doc: dict) -> dict:
    """An aten op inside a step that is no host sync, so damaging it changes no count."""
    steps = [e for e in timed(doc) if str(e.get("name", "")).startswith("step ")]
    lo, hi = min(e["ts"] for e in steps), max(e["ts"] + e["dur"] for e in steps)
    return next(e for e in timed(doc) if e.get("cat") == "cpu_op" and e["name"] == "aten::empty" and lo < e["ts"] < hi)


def step_ranges(doc: dict) -> list[dict]:
    ranges = [e for e in timed(doc) if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("step ")]
    return sorted(ranges, key=lambda e: e["ts"])


def nsys_copy(folder: Path, *sql: str) -> Path:
    path = folder / "nsys.sqlite"
    with gzip.open(GPU_NSYS, "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    db = sqlite3.connect(path)
    for statement in sql:
        db.execute(statement)
    db.commit()
    db.close()
    return path


# ---- the cases --------------------------------------------------------------------------------------
def _ts_huge(d: Path):
    doc = kineto_doc()
    first_op(doc)["ts"] = 10 ** 400
    return [str(write_doc(doc, d / "ts_huge.json"))]


def _ts_digits(d: Path):
    doc = kineto_doc()
    first_op(doc)["ts"] = "__BIG__"
    return [str(write_doc(doc, d / "ts_digits.json", {"__BIG__": "9" * 5000}))]


def _correlation_huge(d: Path):
    doc = kineto_doc(GPU_KINETO)
    launch = next(e for e in timed(doc) if e.get("name") == "cudaLaunchKernel" and "correlation" in e.get("args", {}))
    corr = launch["args"]["correlation"]
    for e in timed(doc):
        if e.get("args", {}).get("correlation") == corr:
            e["args"]["correlation"] = 2 ** 70  # the launch and its kernel: still a pair
    return [str(write_doc(doc, d / "corr.json"))]


def _pid_huge(d: Path):
    doc = kineto_doc()
    first_op(doc)["pid"] = 2 ** 64
    return [str(write_doc(doc, d / "pid.json"))]


def _deep_event(d: Path):
    doc = kineto_doc()
    first_op(doc)["args"] = "__DEEP__"
    return [str(write_doc(doc, d / "deep_event.json", {"__DEEP__": "[" * 200_000 + "]" * 200_000}))]


def _deep_meta(d: Path):
    doc = kineto_doc()
    doc["deep"] = "__DEEP__"
    return [str(write_doc(doc, d / "deep_meta.json", {"__DEEP__": "{\"a\":" * 200_000 + "1" + "}" * 200_000}))]


def _runtime_text(d: Path):
    return [str(nsys_copy(d, "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET start = 'soon' WHERE rowid IN "
                             "(SELECT rowid FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start LIMIT 3)"))]


def _timeline_proc(d: Path):
    return [str(CPU_KINETO), "--timeline", "/proc/t.png"]


def _timeline_read_only(d: Path):
    folder = d / "read-only"
    folder.mkdir()
    folder.chmod(0o555)
    return [str(CPU_KINETO), "--timeline", str(folder / "t.png")]


def _as_root() -> str | None:
    return "runs as root, which may write into a read-only folder" if hasattr(os, "geteuid") and os.geteuid() == 0 else None


def _timeline_missing_folder(d: Path):
    return [str(CPU_KINETO), "--timeline", str(d / "nonexistent" / "dir" / "t.png")]


def _fifo(d: Path):
    path = d / "trace.json"
    os.mkfifo(path)
    return [str(path)]


def _huge_string(chars: int):
    def make(d: Path):
        path = d / "huge_string.json.gz"
        chunk = "a" * (1 << 24)
        with gzip.open(path, "wt", compresslevel=1) as fh:
            fh.write('{"traceEvents": [], "note": "')
            for _ in range(chars // len(chunk)):
                fh.write(chunk)
            fh.write('"}')
        return [str(path)]
    return make


def _bom(d: Path):
    return [str(write_doc(kineto_doc(), d / "bom.json", bom=True))]


def _no_string_ids(d: Path):
    return [str(nsys_copy(d, "DROP TABLE StringIds"))]


def _no_memcpy_enum(d: Path):
    return [str(nsys_copy(d, "DROP TABLE ENUM_CUDA_MEMCPY_OPER"))]


def _step_durations(value):
    def make(d: Path):
        doc = kineto_doc()
        for e in step_ranges(doc):
            if value == "missing":
                del e["dur"]
            else:
                e["dur"] = value
        return [str(write_doc(doc, d / "durations.json"))]
    return make


def _ts_scaled(d: Path):
    doc = kineto_doc()
    for e in timed(doc):
        e["ts"] = e["ts"] * 1e12
    return [str(write_doc(doc, d / "scaled.json"))]


def _same_step_name(d: Path):
    doc = kineto_doc()
    for e in step_ranges(doc):
        e["name"] = "step 1"
    return [str(write_doc(doc, d / "same_name.json"))]


def _overlapping_steps(d: Path):
    doc = kineto_doc()
    ranges = step_ranges(doc)
    for e, nxt in zip(ranges, ranges[1:]):
        e["dur"] = nxt["ts"] - e["ts"] + 50.0  # runs 50 us into the next step
    return [str(write_doc(doc, d / "overlap.json"))]


def _empty_runtime(d: Path):
    return [str(nsys_copy(d, "DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME"))]


def _same_text_twice(d: Path):
    # two StringIds rows with one text: what two versions of one API call become once their suffix is stripped
    return [str(nsys_copy(d, "UPDATE StringIds SET value = 'cudaLaunchKernel' "
                             "WHERE value = 'cudaLaunchKernelExC_v11060'"))]


def _copy_bytes(value: int):
    def make(d: Path):
        return [str(nsys_copy(d, f"UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET bytes = {value}"))]
    return make


def _copies_each_on_a_thread(d: Path):
    # 50,000 copy calls, each on a thread of its own, each with its copy: pairing a copy's call with the call after
    # it on its thread went thread by thread over every copy (over 60 s)
    count = 50_000
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 1, "tid": 1, "ts": 0,
               "dur": count * 10 + 10}]
    for i in range(count):
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "pid": 1, "tid": 100 + i,
                       "ts": i * 10 + 1, "dur": 2, "args": {"correlation": i + 1}})
        events.append({"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
                       "ts": i * 10 + 3, "dur": 2, "args": {"correlation": i + 1, "device": 0, "stream": 7,
                                                           "bytes": 100}})
    return [str(write_doc({"traceEvents": events}, d / "threads.json"))]


def _kernels_as_begin_events(d: Path):
    doc = kineto_doc(GPU_KINETO)
    for event in doc["traceEvents"]:
        if event.get("cat") == "kernel":
            event["ph"] = "B"  # a phase the reader does not pair up
    return [str(write_doc(doc, d / "trace.json"))]


def _gpu_clock_skew(seconds: float):
    def make(d: Path):
        doc = kineto_doc(GPU_KINETO)
        for event in doc["traceEvents"]:
            if event.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "ts" in event:
                event["ts"] += seconds * 1e6  # the GPU's clock off from the host's
        return [str(write_doc(doc, d / "skew.json"))]
    return make


def _second_process(renumber: int):
    """The host process's events copied under a second pid (the GPU's, filed under the device, left single); with
    renumber, the copy's steps numbered on from the first's (its own ProfilerStep#/step ranges)."""
    def make(d: Path):
        doc = kineto_doc(GPU_KINETO)
        host = next(e["pid"] for e in timed(doc) if e.get("cat") == "cuda_runtime")
        twins = []
        for event in doc["traceEvents"]:
            if event.get("pid") == host:
                twin = json.loads(json.dumps(event))
                twin["pid"] = host + 1
                for prefix in ("ProfilerStep#", "step "):
                    number = twin.get("name", "").removeprefix(prefix)
                    if renumber and number != twin.get("name") and number.isdigit():
                        twin["name"] = f"{prefix}{int(number) + renumber}"
                twins.append(twin)
        doc["traceEvents"] += twins
        return [str(write_doc(doc, d / "two_processes.json"))]
    return make


def _ts_true(d: Path):
    doc = kineto_doc()
    first_op(doc)["ts"] = True
    return [str(write_doc(doc, d / "ts_true.json"))]


def _long_host(sql: str):
    def make(d: Path):
        return [str(nsys_copy(d, sql))]
    return make


CASES = [
    Case("ts-10e400", "`ts` = 10**400: OverflowError", _ts_huge, WARNED, "time stamp", CPU_NUMBERS),
    Case("ts-5000-digits", "a 5000-digit `ts`: ValueError", _ts_digits, WARNED, "time stamp", CPU_NUMBERS),
    Case("correlation-2e70", "`correlation` = 2**70: OverflowError", _correlation_huge, WARNED, "correlation",
         {**GPU_NUMBERS, "kernels_per_step": None}),
    Case("pid-2e64", "`pid` = 2**64: OverflowError", _pid_huge, WARNED, "pid", CPU_NUMBERS),
    Case("deep-event", "200,000-deep nesting in an event: RecursionError", _deep_event, REFUSED, "nested"),
    Case("deep-metadata", "200,000-deep nesting in metadata: RecursionError", _deep_meta, REFUSED, "nested"),
    Case("nsys-runtime-text-start", "text in `CUPTI_ACTIVITY_KIND_RUNTIME.start`: ValueError", _runtime_text, WARNED,
         "not an integer", {"steps": 7}),
    Case("timeline-proc", "`--timeline /proc/t.png`: FileNotFoundError", _timeline_proc, REFUSED, "t.png"),
    Case("timeline-read-only", "`--timeline` into a read-only folder: PermissionError", _timeline_read_only, REFUSED,
         "cannot be written", skip=_as_root),
    Case("timeline-missing-folder", "`--timeline /nonexistent/dir/t.png` created the folders",
         _timeline_missing_folder, REFUSED, "does not exist"),
    Case("fifo", "a FIFO named `trace.json`: hang", _fifo, REFUSED, "named pipe"),
    Case("string-80M", "a .json.gz holding one long string: quadratic time", _huge_string(80 << 20), REFUSED,
         "longer than"),
    Case("string-2G", "a .json.gz holding one 2 GB string: killed after 240 s", _huge_string(2 << 30), REFUSED,
         "longer than", slow=True),
    Case("utf8-bom", "a UTF-8 byte-order mark: rejected", _bom, WARNED, "", CPU_NUMBERS),
    Case("nsys-no-stringids", "nsys export without `StringIds`: 0 host syncs instead of 21", _no_string_ids, REFUSED,
         "StringIds"),
    Case("nsys-no-memcpy-enum", "nsys export without `ENUM_CUDA_MEMCPY_OPER`: 0 pageable copies instead of 14",
         _no_memcpy_enum, WARNED, "ENUM_CUDA_MEMCPY_OPER", {"steps": 7, "host_syncs_in_steps": 21}),
    Case("step-dur-nan", "NaN step durations: steps of 0 ms", _step_durations(float("nan")), WARNED, "no duration",
         CPU_NUMBERS),
    Case("step-dur-negative", "negative step durations: steps of 0 ms", _step_durations(-5.0), WARNED, "no duration",
         CPU_NUMBERS),
    Case("step-dur-missing", "missing step durations: steps of 0 ms", _step_durations("missing"), WARNED,
         "no duration", CPU_NUMBERS),
    Case("ts-scaled-1e12", "`ts` scaled by 1e12: 1 step instead of 7", _ts_scaled, REFUSED, "time stamp"),
    Case("steps-same-name", "seven steps all named `step 1`: 1 step", _same_step_name, WARNED, "repeat", CPU_NUMBERS),
    Case("steps-overlap", "overlapping step ranges: treated as nested", _overlapping_steps, WARNED, "overlap",
         CPU_NUMBERS),
    Case("nsys-same-text-twice", "two StringIds rows with one text: ValueError (categories must be unique)",
         _same_text_twice, WARNED, "", GPU_NUMBERS),
    Case("nsys-bytes-negative", "a copy of -10**12 bytes: -2,000,000 MB per step", _copy_bytes(-10**12), WARNED,
         "byte count", GPU_NUMBERS),
    Case("nsys-bytes-9e18", "copies of 9e18 bytes each: their sum wrapped to a negative MB per step",
         _copy_bytes(9 * 10**18), WARNED, "byte count", GPU_NUMBERS),
    Case("nsys-sync-50s", "syncs lasting 50 s each: waiting 6,515,812% of step time",
         _long_host("UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET end = start + 50000000000 WHERE nameId IN "
                    "(SELECT id FROM StringIds WHERE value LIKE 'cudaStreamSynchronize%')"), WARNED,
         "end after the step they started in", GPU_NUMBERS),
    Case("nsys-data-range-50s", "`data` ranges lasting 50 s: waiting for data 2,171,937% of step time",
         _long_host("UPDATE NVTX_EVENTS SET end = start + 50000000000 WHERE text = 'data'"), WARNED,
         "end after the step they started in", GPU_NUMBERS),
    Case("copies-50000-threads", "50,000 copies, each call on its own thread: a hang (over 60 s)",
         _copies_each_on_a_thread, WARNED, "", {"steps": 1, "pageable_h2d_copies": 50_000}),
    Case("nsys-runtime-twice", "every CUDA call recorded twice: 42 syncs, and each copy paired with its own twin",
         _long_host("INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME"), WARNED,
         "appear twice or more", GPU_NUMBERS),
    Case("kineto-kernels-ph-B", "kernels in phase 'B', not 'X': left out in silence, the GPU called idle",
         _kernels_as_begin_events, WARNED, "other than complete ('X')", GPU_NUMBERS),
    Case("nsys-step-50s", "`step 3` lasting 50 s around steps 4..6: step 3 gone from the count, unsaid",
         _long_host("UPDATE NVTX_EVENTS SET end = start + 50000000000 WHERE text = 'step 3'"), WARNED,
         "hold two or more other step ranges", {"steps": 6}),
    Case("nsys-empty-runtime", "an emptied RUNTIME table: `cuda: false` yet a GPU idle figure", _empty_runtime, WARNED,
         "no CUDA API calls", {"cuda": True}),
    Case("nsys-step-end-null", "NVTX `step 3` with a NULL `end`: 6 steps, the warning blaming kernels without a launch",
         _long_host("UPDATE NVTX_EVENTS SET end = NULL WHERE text = 'step 3'"), WARNED, "step 3) has no end",
         {"steps": 6, "host_syncs_in_steps": 18, "pageable_h2d_copies": 12}),
    Case("nsys-steps-end-null", "every NVTX step range with a NULL `end`: 'no step ranges matched' the pattern, and "
         "counts over the whole trace", _long_host("UPDATE NVTX_EVENTS SET end = NULL WHERE text LIKE 'step %'"),
         REFUSED, "has no end"),
    Case("kineto-gpu-clock-5s-late", "GPU events 5 s after the host's (clock skew): GPU idle 100% of step time, unsaid",
         _gpu_clock_skew(5.0), WARNED, "clock skew", {**GPU_NUMBERS, "kernels_per_step": 19.0}),
    Case("kineto-gpu-clock-5s-early", "GPU events 5 s before the host's (clock skew): GPU idle 100%, all of it "
         "'waiting for the host', unsaid", _gpu_clock_skew(-5.0), WARNED, "clock skew",
         {**GPU_NUMBERS, "kernels_per_step": 19.0}),
    Case("kineto-second-process", "the host process copied under a second pid: 0 pageable copies, 0 kernels per step, "
         "blamed on correlation ids", _second_process(0), WARNED, "2 host processes",
         {**GPU_NUMBERS, "kernels_per_step": 19.0}),
    Case("kineto-second-process-own-steps", "a second pid with its own steps (7..13): 14 steps, 42 host syncs, 0 "
         "pageable copies", _second_process(7), WARNED, "2 host processes", {**GPU_NUMBERS, "kernels_per_step": 19.0}),
    Case("ts-true", "`ts` = true: read as 1 us, unsaid", _ts_true, WARNED, "time stamp", CPU_NUMBERS),
    Case("step-dur-true", "step durations of `true`: read as 1 us, steps of 0.001 ms holding 0 host syncs, unsaid", _step_durations(True), WARNED,
         "no duration", CPU_NUMBERS),
]


# ---- the results table ------------------------------------------------------------------------------
RUNNER = """
import json, resource, sys, time
t0 = time.perf_counter()
from checker.cli import main
code = main(["report", "--json", *sys.argv[2:]])
wall = time.perf_counter() - t0
peak = int(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')).split()[1]) / 1024  # this process's own peak RSS
open(sys.argv[1], "w").write(json.dumps({"code": code, "wall_s": wall, "peak_mb": peak}))
"""


def run_case(case: Case, folder: Path, timeout: float = 600) -> dict:
    """Run one case in a fresh process: exit code, the stderr line or the first warning, time, memory."""
    import subprocess

    argv = case.make(folder)
    stats = folder / "stats.json"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    try:
        done = subprocess.run([sys.executable, "-c", RUNNER, str(stats), *argv], capture_output=True, text=True,
                              env=env, cwd=ROOT, timeout=timeout, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        return {"code": None, "said": f"still running after {timeout:.0f} s", "wall_s": timeout, "peak_mb": None}
    result = json.loads(stats.read_text()) if stats.exists() else {"code": done.returncode, "wall_s": None, "peak_mb": None}
    if done.returncode != 0 and "Traceback" in done.stderr:
        result["said"] = "TRACEBACK: " + done.stderr.strip().splitlines()[-1]
    elif result["code"] == 2:
        result["said"] = done.stderr.strip().replace(str(folder) + "/", "").replace(str(ROOT) + "/", "")
    else:
        summary = json.loads(done.stdout)
        warnings = summary.get("warnings", [])
        result["said"] = ("warning: " + warnings[0]) if warnings else "no warning"
        result["numbers"] = {k: summary.get(k) for k in ("steps", "host_syncs_in_steps", "pageable_h2d_copies")}
    return result


def write_table(out: Path) -> None:
    import datetime
    import platform
    import tempfile

    import pandas

    rows = ["| case | what the issue saw | exit | what `workbook report` says now | s | peak MB |",
            "|---|---|---:|---|---:|---:|"]
    for case in CASES:
        reason = case.skip()
        if reason:
            rows.append(f"| {case.id} | {case.seen} | - | not run here: {reason} | - | - |")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            r = run_case(case, Path(tmp))
        said = r["said"].replace("|", "\\|")
        if len(said) > 220:
            said = said[:217] + "..."
        numbers = r.get("numbers")
        if numbers:
            said += " (" + ", ".join(f"{k} {v}" for k, v in numbers.items() if v is not None) + ")"
        wall = f"{r['wall_s']:.2f}" if r.get("wall_s") is not None else "-"
        peak = f"{r['peak_mb']:.0f}" if r.get("peak_mb") is not None else "-"
        rows.append(f"| {case.id} | {case.seen} | {r['code']} | {said} | {wall} | {peak} |")
        print(rows[-1], file=sys.stderr)
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    date = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    head = (f"Written by `tests/trace/damage_cases.py --write` from real runs of `workbook report --json`, each case in "
            f"a fresh process, on {cpu} ({os.cpu_count()} cores), Python {platform.python_version()}, pandas "
            f"{pandas.__version__}, {date}. Exit 2 is a refusal with one line; exit 0 gives the numbers with the "
            "warnings shown (the first one here). Each damaged input is made from a committed trace "
            "(tests/data/traces/pageable_item, tests/data/traces/cpu/pageable_item.json.gz).")
    out.write_text("# Damaged and hostile traces\n\n" + head + "\n\n" + "\n".join(rows) + "\n")


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="rewrite the damaged-trace table from real runs")
    parser.add_argument("--write", type=Path, required=True)
    write_table(parser.parse_args().write)
