"""Loading: formats detected from the content, the streaming Kineto reader, and bad input."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import sqlite3
import stat
import time

import pytest

from checker.trace import TraceError, empty_events, load
from checker.trace import kineto
from checker.trace.events import COLUMNS, DTYPES
from trace_helpers import cpu_trace_path, gpu_trace_path, need

KINETO = cpu_trace_path("pageable_item")


def _kineto_doc() -> dict:
    with gzip.open(KINETO, "rt") as fh:
        return json.load(fh)


def test_event_table_columns_and_dtypes_are_the_same_for_every_source(loaded):
    tables = [empty_events(), loaded(KINETO).events]
    nsys = gpu_trace_path("pageable_item", "nsys")
    if nsys.exists():
        tables.append(loaded(nsys).events)
    for table in tables:
        assert tuple(table.columns) == COLUMNS
        for column in COLUMNS:
            if column == "name" or column == "call_from":
                assert str(table[column].dtype) == "category"
            else:
                assert table[column].dtype == DTYPES[column], column


def test_same_trace_plain_gzipped_or_renamed_loads_the_same(tmp_path):
    plain = tmp_path / "trace.json"
    with gzip.open(KINETO, "rb") as src, open(plain, "wb") as dst:
        shutil.copyfileobj(src, dst)
    renamed = tmp_path / "looks_like.sqlite"  # the content decides, not the name
    shutil.copy(KINETO, renamed)
    counts = [load(p).summary()["host_syncs_in_steps"] for p in (KINETO, plain, renamed)]
    assert counts == [7, 7, 7]


def test_streaming_reader_keeps_exactly_the_timed_events_of_known_kinds(monkeypatch):
    doc = _kineto_doc()
    expected = sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") in kineto.CATEGORY_KIND)
    full = load(KINETO).events
    monkeypatch.setattr(kineto, "CHUNK_CHARS", 5000)  # many small batches, cuts inside events
    small = load(KINETO).events
    assert len(full) == len(small) == expected
    assert full["name"].astype(str).tolist() == small["name"].astype(str).tolist()


def test_compact_json_with_awkward_names_and_key_order(tmp_path, monkeypatch):
    doc = _kineto_doc()
    events = doc.pop("traceEvents")
    events[10] = dict(events[10], name='odd "},{" name')  # a cut at '},' inside a string must not fool it
    path = tmp_path / "compact.json"
    path.write_text(json.dumps({"traceEvents": events, **doc}, separators=(",", ":")))
    monkeypatch.setattr(kineto, "CHUNK_CHARS", 3000)
    trace = load(path)
    assert 'odd "},{" name' in set(trace.events["name"].astype(str))
    assert trace.summary()["host_syncs_in_steps"] == 7


def test_tensorboard_folder_with_one_trace(tmp_path):
    folder = tmp_path / "tb" / "plugins" / "profile" / "run1"
    folder.mkdir(parents=True)
    shutil.copy(KINETO, folder / "host_123.1700000000.pt.trace.json.gz")
    assert load(tmp_path / "tb").summary()["steps"] == 7
    shutil.copy(KINETO, folder / "host_456.1700000001.pt.trace.json.gz")
    with pytest.raises(TraceError, match="holds 2 traces"):
        load(tmp_path / "tb")


def _error(path, **kwargs) -> str:
    with pytest.raises(TraceError) as info:
        load(path, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_truncated_json_is_one_clear_error(tmp_path):
    with gzip.open(KINETO, "rb") as fh:
        data = fh.read()
    cut = tmp_path / "cut.json"
    cut.write_bytes(data[: len(data) // 2])
    assert "cut off or corrupt" in _error(cut)
    cut_gz = tmp_path / "cut.json.gz"
    cut_gz.write_bytes(KINETO.read_bytes()[:20000])
    assert "cut off or corrupt" in _error(cut_gz)


def test_corrupt_json_is_one_clear_error(tmp_path):
    with gzip.open(KINETO, "rt") as fh:
        text = fh.read()
    bad = tmp_path / "bad.json"
    at = text.index('"dur":', len(text) // 2)
    bad.write_text(text[:at] + '"dur" 1,' + text[at + 6:])  # a missing colon in the middle of the events
    assert "not a readable Kineto trace" in _error(bad)


def test_not_a_trace(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    assert "empty" in _error(empty)
    text = tmp_path / "notes.txt"
    text.write_text("hello, world\n")
    assert "not a trace" in _error(text)
    other_json = tmp_path / "config.json"
    other_json.write_text('{"lr": 0.1, "steps": [1, 2]}')
    assert "without a traceEvents list" in _error(other_json)
    assert "no such file" in _error(tmp_path / "missing.json")


def test_trace_without_events(tmp_path):
    path = tmp_path / "none.json"
    path.write_text('{"schemaVersion": 1, "traceEvents": []}')
    assert "holds no events" in _error(path)
    only_meta = tmp_path / "meta.json"
    only_meta.write_text(json.dumps({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0}]}))
    assert "holds no events" in _error(only_meta)


def test_sqlite_without_cuda_tables_says_how_to_capture(tmp_path):
    path = tmp_path / "cpu_only.sqlite"
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE StringIds (id INTEGER PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE NVTX_EVENTS (start INTEGER, end INTEGER, eventType INTEGER, text TEXT, globalTid INTEGER);
        CREATE TABLE OSRT_API (start INTEGER, end INTEGER, nameId INTEGER, globalTid INTEGER);
    """)
    db.close()
    message = _error(path)
    assert "no CUDA activity" in message and "nsys profile -t cuda" in message


def test_sqlite_that_is_not_an_nsys_export(tmp_path):
    path = tmp_path / "app.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER, name TEXT)")
    db.commit()
    db.close()
    assert "not an nsys export" in _error(path)


def test_nsys_rep_without_nsys_says_how_to_export(tmp_path, monkeypatch):
    report = tmp_path / "r.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 1\n\x00\x01 binary")
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.delenv("WORKBOOK_NSYS", raising=False)
    message = _error(report)
    assert "nsys export --type sqlite --output r.sqlite r.nsys-rep" in message


@need(gpu_trace_path("pageable_item", "nsys"))
def test_nsys_rep_is_exported_with_the_nsys_named_by_workbook_nsys(tmp_path, monkeypatch):
    source = tmp_path / "export.sqlite"
    with gzip.open(gpu_trace_path("pageable_item", "nsys"), "rb") as src, open(source, "wb") as dst:
        shutil.copyfileobj(src, dst)
    fake = tmp_path / "nsys"  # stands in for `nsys export --type sqlite ... --output OUT REPORT`
    fake.write_text(f"#!/bin/sh\nwhile [ $# -gt 1 ]; do [ \"$1\" = --output ] && out=$2; shift; done\n"
                    f"cp {source} \"$out\"\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("WORKBOOK_NSYS", str(fake))
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 1\n")
    trace = load(report)
    assert trace.format == "nsys" and trace.summary()["host_syncs_in_steps"] == 21
    assert set(os.listdir(tmp_path)) == {"export.sqlite", "nsys", "run.nsys-rep"}  # exported to a temp folder


def test_an_nsys_export_that_hangs_is_stopped_and_said_in_one_line(tmp_path, monkeypatch):
    fake = tmp_path / "nsys"  # hangs, as does a child it started
    fake.write_text("#!/bin/sh\nsleep 120 &\nsleep 120\n")
    fake.chmod(0o755)
    monkeypatch.setenv("WORKBOOK_NSYS", str(fake))
    monkeypatch.setenv("WORKBOOK_NSYS_EXPORT_TIMEOUT_S", "1")
    report = tmp_path / "run.nsys-rep"
    report.write_bytes(b"NVIDIA Tegra Profiler Report 1\n")
    started = time.monotonic()
    message = _error(report)
    assert time.monotonic() - started < 30
    assert "did not finish within 1 s" in message and "WORKBOOK_NSYS_EXPORT_TIMEOUT_S" in message
    assert "\n" not in message
    monkeypatch.setenv("WORKBOOK_NSYS_EXPORT_TIMEOUT_S", "soon")
    assert "give a number of seconds" in _error(report)


def test_event_with_fields_of_the_wrong_type(tmp_path):
    path = tmp_path / "odd.json"
    path.write_text(json.dumps({"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "pid": 1, "tid": 1, "ts": "soon", "dur": 1},
        "not an event"]}))
    assert "wrong type" in _error(path)
