"""Damaged and hostile traces (issue 13): never a traceback, never a hang, never a silent wrong number.

Every case of tests/trace/damage_cases.py runs through `workbook report --json`: a refused one must exit 2
with one line naming the file; a damaged but readable one must exit 0 with a warning saying what was
left out or guessed, and the numbers that damage did not touch still right.
"""

from __future__ import annotations

import json
import re
import signal
import time

import pytest

from checker.trace import TraceError, load
from checker.cli import main
from damage_cases import CASES, CPU_KINETO, REFUSED, kineto_doc, write_doc
from trace_helpers import ROOT


def report(capsys, argv):
    code = main(["report", "--json", *argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def alarm():
    """Fail (instead of hanging the suite) when a case runs longer than 60 s."""
    def on_alarm(*_):
        raise AssertionError("still running after 60 s: a hang")
    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("case", [c for c in CASES if not c.slow], ids=lambda c: c.id)
def test_damaged_trace(capsys, tmp_path, alarm, case):
    reason = case.skip()
    if reason:
        pytest.skip(reason)
    argv = case.make(tmp_path)
    started = time.monotonic()
    code, out, err = report(capsys, argv)
    assert time.monotonic() - started < 30
    if case.expect == REFUSED:
        assert code == 2 and out == "", err
        assert len(err.strip().splitlines()) == 1, err
        assert case.says in err
        assert argv[0] in err or argv[-1] in err  # names the file
        return
    assert code == 0, err
    summary = json.loads(out)
    warnings = summary["warnings"]
    if case.says:
        assert any(case.says in w for w in warnings), warnings
    else:
        assert warnings == []
    for key, value in case.numbers.items():
        if value is not None:
            assert summary[key] == value, key


def test_missing_timeline_folder_is_not_created(capsys, tmp_path):
    out = tmp_path / "nonexistent" / "dir" / "t.png"
    assert report(capsys, [str(CPU_KINETO), "--timeline", str(out)])[0] == 2
    assert not (tmp_path / "nonexistent").exists()


def test_timeline_write_error_is_one_line(capsys, tmp_path, monkeypatch):
    import matplotlib.figure

    def refuse(self, *args, **kwargs):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", refuse)
    code, _, err = report(capsys, [str(CPU_KINETO), "--timeline", str(tmp_path / "t.png")])
    assert code == 2 and "Permission denied" in err and len(err.strip().splitlines()) == 1


def test_a_fifo_in_a_folder_is_not_opened(tmp_path, alarm):
    import os
    import shutil

    os.mkfifo(tmp_path / "a.pt.trace.json")
    shutil.copy(CPU_KINETO, tmp_path / "b.pt.trace.json.gz")
    assert load(tmp_path).summary()["steps"] == 7


def test_correlation_beyond_64_bits_keeps_the_launch_and_its_kernel_paired(capsys, tmp_path):
    from damage_cases import GPU_KINETO, _correlation_huge

    before = load(GPU_KINETO).summary()
    code, out, _ = report(capsys, _correlation_huge(tmp_path))
    assert code == 0 and json.loads(out)["kernels_per_step"] == before["kernels_per_step"]


def test_step_without_duration_takes_the_next_steps_start(tmp_path):
    from damage_cases import _step_durations

    sound = load(CPU_KINETO).get_steps()
    mended = load(_step_durations("missing")(tmp_path)[0]).get_steps()
    assert mended["start_ns"].tolist() == sound["start_ns"].tolist()
    assert (mended["end_ns"].iloc[:-1].to_numpy() == sound["start_ns"].iloc[1:].to_numpy()).all()
    assert (mended["dur_ns"] > 0).all()


def test_utf16_trace_with_a_byte_order_mark(tmp_path):
    path = tmp_path / "utf16.json"
    path.write_bytes(json.dumps(kineto_doc()).encode("utf-16"))
    assert load(path).summary()["host_syncs_in_steps"] == 7


def test_an_integer_of_thousands_of_digits_in_metadata_is_no_error(tmp_path):
    doc = kineto_doc()
    doc["odd"] = "__BIG__"
    path = write_doc(doc, tmp_path / "meta.json", {"__BIG__": "7" * 6000})
    assert load(path).summary()["host_syncs_in_steps"] == 7


def test_a_value_longer_than_the_bound_is_refused_in_time_proportional_to_its_length(tmp_path, monkeypatch):
    from checker.trace import kineto

    path = tmp_path / "long.json"
    monkeypatch.setattr(kineto, "MAX_VALUE_CHARS", 1 << 20)
    monkeypatch.setattr(kineto, "CHUNK_CHARS", 1 << 12)  # 256 rounds of reading if each read were one chunk
    path.write_text('{"traceEvents": [], "note": "' + "a" * (4 << 20) + '"}')
    started = time.monotonic()
    with pytest.raises(TraceError, match="longer than 1 Mi characters"):
        load(path)
    assert time.monotonic() - started < 5


def test_steps_holding_no_aten_ops_give_typed_empty_frames(tmp_path):
    """Issue 11, item 6: a trace whose steps hold no aten ops; every analysis answers with its columns."""
    events = []
    for i in range(3):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"step {i}", "pid": 1, "tid": 1,
                       "ts": 100.0 * i, "dur": 90.0})
        events.append({"ph": "X", "cat": "python_function", "name": "train.py(3): <module>", "pid": 1, "tid": 1,
                       "ts": 100.0 * i + 5, "dur": 10.0})
    path = tmp_path / "no_aten.json"
    path.write_text(json.dumps({"traceEvents": events}))
    trace = load(path)
    assert trace.get_steps()["step"].tolist() == [0, 1, 2]
    frames = {
        "host_syncs": (trace.get_host_syncs(), {"step", "name", "where"}),
        "copies": (trace.get_copies(), {"step", "pageable"}),
        "cpu_ops": (trace.get_cpu_ops(), {"step", "name", "self_ns", "top_level"}),
        "top_ops": (trace.get_top_ops(), {"name", "count_per_step", "self_ms_per_step"}),
        "kernels_per_step": (trace.get_kernels_per_step(), {"step", "kernels"}),
        "data_wait": (trace.get_data_wait(), {"step", "data_wait_ns"}),
    }
    for what, (frame, columns) in frames.items():
        assert columns <= set(frame.columns), what
    assert trace.get_cpu_ops().empty and trace.get_cpu_ops()["step"].dtype == "Int64"
    summary = trace.summary()
    assert summary["steps"] == 3 and summary["top_ops"] == [] and summary["host_syncs_in_steps"] == 0


def test_damage_table_lists_every_case():
    table = (ROOT / "docs" / "results" / "trace-damage-cases.md").read_text()
    for case in CASES:
        assert f"| {case.id} |" in table, case.id
    assert "TRACEBACK" not in table and "still running" not in table


def test_events_that_are_all_unusable_are_named_not_called_missing(capsys, tmp_path):
    """Every event dropped (no category, a time stamp that is text): the line says why, not 'no events'."""
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({"traceEvents": [{"ph": "X", "name": "ProfilerStep#1", "ts": "abc", "dur": 5,
                                                 "pid": 1, "tid": 1}]}))
    code, out, err = report(capsys, [str(path)])
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "no usable events" in err and "holds no events" not in err


def test_waits_a_damaged_end_stretched_cost_no_more_than_the_steps(capsys, tmp_path):
    """Syncs or `data` ranges whose end a damaged export put 50 s later: every share of step time stays at 100%
    or below, and the warning says the calls were cut at their step's end."""
    from damage_cases import CASES as cases

    for case_id in ("nsys-sync-50s", "nsys-data-range-50s"):
        case = next(c for c in cases if c.id == case_id)
        (tmp_path / case_id).mkdir()
        code, out, _ = report(capsys, case.make(tmp_path / case_id))
        summary = json.loads(out)
        assert code == 0 and any("cut at the step's end" in w for w in summary["warnings"])
        for line in summary["findings"]:
            for number in re.findall(r"(\d+)% of step time", line):
                assert int(number) <= 100, line


def test_one_kernel_a_damaged_stamp_put_hours_away_does_not_stretch_the_timeline(tmp_path):
    """A kernel whose `ts` moved 4e12 us later made the timeline span 4e9 ms, every other bar in one pixel."""
    from damage_cases import GPU_KINETO
    from checker.trace.timeline import _window

    doc = kineto_doc(GPU_KINETO)
    kernel = next(e for e in doc["traceEvents"] if e.get("cat") == "kernel")
    kernel["ts"] += 4e12
    lo, hi = _window(load(write_doc(doc, tmp_path / "far.json")), 20)
    lo0, hi0 = _window(load(GPU_KINETO), 20)
    assert (lo, hi) == (lo0, hi0)


def _case(case_id: str):
    return next(c for c in CASES if c.id == case_id)


def test_an_unterminated_step_range_is_said_and_only_its_step_left_out(capsys, tmp_path):
    """NVTX `step 3` without an end: the one warning names it (not kernels without a launch), and the numbers are the
    sound export's without step 3."""
    from damage_cases import GPU_NSYS

    code, out, _ = report(capsys, _case("nsys-step-end-null").make(tmp_path))
    summary = json.loads(out)
    assert code == 0 and len(summary["warnings"]) == 1 and "(step 3) has no end" in summary["warnings"][0]
    sound = load(GPU_NSYS).summary()
    assert summary["step_numbers"] == [s for s in sound["step_numbers"] if s != 3]
    for key in ("host_syncs_per_step", "pageable_h2d_per_step", "kernels_per_step"):
        assert summary[key] == sound[key], key


def test_no_step_range_with_an_end_is_refused_as_such_not_as_a_pattern_that_matched_nothing(capsys, tmp_path):
    code, out, err = report(capsys, _case("nsys-steps-end-null").make(tmp_path) + ["--chapter", "02"])
    assert code == 2 and out == "" and "7 step ranges" in err and "no step ranges matched" not in err


@pytest.mark.parametrize("case_id", ["kineto-gpu-clock-5s-late", "kineto-gpu-clock-5s-early"])
def test_gpu_clock_skew_is_said_and_gpu_idle_time_not_given(capsys, tmp_path, case_id):
    """GPU events 5 s off the host's clock lie in no step's window: GPU idle 100% was reported, unsaid."""
    code, out, _ = report(capsys, _case(case_id).make(tmp_path))
    summary = json.loads(out)
    assert code == 0 and len(summary["warnings"]) == 1 and "clock skew" in summary["warnings"][0]
    assert ("all 161 started at least 5,000 ms after" if "late" in case_id else "161 of 161 started before") \
        in summary["warnings"][0]
    for key in ("gpu_idle_fraction", "gpu_idle_host_wait_fraction", "data_wait_gpu_idle_fraction",
                "data_wait_after_sync_fraction"):
        assert summary[key] is None, key
    assert not any("idle" in line for line in summary["findings"]), summary["findings"]


def test_gpu_work_a_little_behind_its_steps_is_no_clock_skew(tmp_path):
    """The GPU may run behind the host (a queue of launches): 0.5 s after the last step is not called skew."""
    from damage_cases import _gpu_clock_skew

    assert not any("clock skew" in w for w in load(_gpu_clock_skew(0.5)(tmp_path)[0]).get_warnings())


def test_a_gpu_seconds_behind_a_host_that_ran_ahead_is_no_clock_skew(tmp_path):
    """A GPU-bound job whose host launches far ahead: after the first kernel, launched into an idle GPU, every later
    one starts seconds after its launch, and after the last step. That is a deep queue, not skew: GPU time is given."""
    from damage_cases import GPU_KINETO

    doc = kineto_doc(GPU_KINETO)
    gpu = sorted((e for e in doc["traceEvents"] if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                  and "ts" in e), key=lambda e: e["ts"])
    for event in gpu[1:]:
        event["ts"] += 3e6
    trace = load(write_doc(doc, tmp_path / "queued.json"))
    assert not any("clock skew" in w for w in trace.get_warnings()), trace.get_warnings()
    assert trace.summary()["gpu_idle_fraction"] is not None


@pytest.mark.parametrize("case_id", ["kineto-second-process", "kineto-second-process-own-steps"])
def test_a_second_host_process_is_left_out_and_said(capsys, tmp_path, case_id):
    """The host process copied under a second pid: one process counted, by name, with the sound trace's numbers."""
    from damage_cases import GPU_KINETO

    code, out, _ = report(capsys, _case(case_id).make(tmp_path))
    summary = json.loads(out)
    assert code == 0 and len(summary["warnings"]) == 1, summary["warnings"]
    assert "only pid 442 is counted" in summary["warnings"][0] and "pid 443's" in summary["warnings"][0]
    sound = load(GPU_KINETO).summary()
    for key in ("step_numbers", "host_syncs_in_steps", "pageable_h2d_copies", "kernels_per_step", "launches_per_step",
                "gpu_idle_fraction", "gpu_idle_host_wait_fraction", "data_wait_fraction"):
        assert summary[key] == sound[key], key


def test_a_boolean_duration_or_time_stamp_is_no_number(tmp_path):
    """`"ts": true` / `"dur": true` are no times (Python's float() reads them as 1): left out or taken as 0, said."""
    doc = kineto_doc()
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::odd", "pid": 1, "tid": 1, "ts": True,
                               "dur": 3})
    doc["traceEvents"].append({"ph": "X", "cat": "cpu_op", "name": "aten::odd", "pid": 1, "tid": 1, "ts": 5,
                               "dur": False})
    trace = load(write_doc(doc, tmp_path / "bools.json"))
    warnings = trace.get_warnings()
    assert any("ts=true" in w and "left out" in w for w in warnings), warnings
    assert any("dur=false" in w for w in warnings), warnings
    assert (trace.events["name"] == "aten::odd").sum() == 1


def test_gpu_fed_on_a_skewed_trace_names_the_skew_not_missing_gpu_work(tmp_path):
    """gpu_fed cannot read a skewed trace's GPU against its steps: it fails, and says why (there is GPU work)."""
    from pathlib import Path

    from checker.base.chapters import CheckSpec
    from checker.checks.evidence import Evidence
    from checker.checks.gpu_fed import gpu_fed

    spec = CheckSpec(name="gpu_fed", doc="fed", threshold={"cuda": 0.5}, skip={}, options={})
    path = _case("kineto-gpu-clock-5s-late").make(tmp_path)[0]
    evidence = Evidence(chapter=None, device="cuda", trace_tool="torch", candidate=Path("train.py"), cfg={},
                        traced=(None, None), traces={"candidate": load(path)})
    outcome = gpu_fed(evidence, spec)
    assert outcome.status == "failed" and "clock skew" in outcome.evidence[0], outcome.evidence
