"""Property-based tests (hypothesis): the real committed traces of both formats, damaged at random.

Properties, for any damage hypothesis finds:

- never a traceback: ``load()`` and the report either succeed, with a summary whose numbers are finite
  (or null) and that JSON can write, or raise TraceError with one line naming the file;
- never a silent wrong number: when the damage touches data the counts rest on (a time stamp, a duration,
  a name, a category, an nsys start or end), the headline numbers are those of the sound trace, or the
  summary carries a warning.

Runs are derandomized (the same examples on every run) and small, so the suite stays quick on CI's two
cores; raise EXAMPLES locally to search harder.
"""

from __future__ import annotations

import copy
import gzip
import json
import math
import shutil
import sqlite3
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from checker.trace import TraceError, load  # noqa: E402
from checker.trace.report import render_text  # noqa: E402
from trace_helpers import cpu_trace_path, gpu_trace_path  # noqa: E402

EXAMPLES = 20
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])
KINETO = {"cpu": cpu_trace_path("pageable_item"), "gpu": gpu_trace_path("pageable_item", "kineto")}
NSYS = gpu_trace_path("pageable_item", "nsys")
HEADLINE = ("steps", "host_syncs_in_steps", "pageable_h2d_copies", "pinned_h2d_copies", "kernels_per_step")


def _doc(which: str) -> dict:
    with gzip.open(KINETO[which], "rt") as fh:
        return json.load(fh)


DOCS = {which: _doc(which) for which in KINETO}
# the events the engine keeps (complete events of known categories): damage aims at these
KEPT = {which: [i for i, e in enumerate(doc["traceEvents"]) if e.get("ph") == "X" and e.get("cat") not in ("Trace", "overhead")]
        for which, doc in DOCS.items()}
SOUND: dict = {}


def sound(key, path) -> dict:
    if key not in SOUND:
        SOUND[key] = load(path).summary()
    return SOUND[key]


def check_outcome(path: Path) -> dict | None:
    """Load and report; the summary, or None when the trace was refused (with one line naming the file)."""
    try:
        trace = load(path)
        summary = trace.summary()
        render_text(summary)
    except TraceError as exc:
        message = str(exc)
        assert "\n" not in message and str(path) in message, message
        return None
    json.dumps(summary, allow_nan=False, default=lambda v: v.item() if hasattr(v, "item") else str(v))
    for key, value in summary.items():
        if isinstance(value, float):
            assert math.isfinite(value), key
    return summary


# ---- values a damaged field may hold ------------------------------------------------------------------
scalars = st.one_of(
    st.sampled_from([10 ** 400, -(10 ** 400), 2 ** 63, 2 ** 64, -(2 ** 63) - 1]),
    st.none(), st.booleans(),
    st.integers(min_value=-(2 ** 80), max_value=2 ** 80),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
)
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                      max_leaves=6)
FIELDS = ("ts", "dur", "name", "cat", "ph", "pid", "tid", "args")
ARG_FIELDS = ("correlation", "device", "stream", "bytes", "External id", "CallFrom")


def _apply(which: str, edits) -> dict:
    """A copy of a trace with edits applied: (index among the kept events, field, value or DELETE); only the
    edited events are copied."""
    doc, kept = DOCS[which], KEPT[which]
    out = dict(doc)
    events = list(doc["traceEvents"])
    for index, field, value in edits:
        i = kept[index % len(kept)]
        event = events[i]
        if not isinstance(event, dict):
            continue
        event = copy.deepcopy(event)
        target = event
        if field in ARG_FIELDS:
            target = event.setdefault("args", {}) if isinstance(event.get("args"), dict) else event
        if value is DELETE:
            target.pop(field, None)
        else:
            target[field] = value
        events[i] = event
    out["traceEvents"] = events
    return out


DELETE = object()


def _write(doc: dict, path: Path) -> Path:
    path.write_text(json.dumps(doc, default=str))
    return path


@SETTINGS
@given(which=st.sampled_from(sorted(KINETO)),
       edits=st.lists(st.tuples(st.integers(min_value=0), st.sampled_from(FIELDS + ARG_FIELDS),
                                st.one_of(values, st.just(DELETE))), min_size=1, max_size=6))
def test_kineto_any_field_damage_is_never_a_traceback(tmp_path_factory, which, edits):
    path = _write(_apply(which, edits), tmp_path_factory.mktemp("k") / "trace.json")
    check_outcome(path)


numeric_damage = st.one_of(st.just(DELETE), st.none(), st.just(float("nan")), st.just(float("inf")),
                           st.floats(max_value=-1e-3, allow_nan=False, allow_infinity=False),
                           st.just(10 ** 400), st.just(2 ** 70))


@SETTINGS
@given(which=st.sampled_from(sorted(KINETO)),
       edits=st.lists(st.one_of(
           st.tuples(st.integers(min_value=0), st.sampled_from(("ts", "dur")), numeric_damage),
           st.tuples(st.integers(min_value=0), st.sampled_from(("name", "cat")), st.just(DELETE)),
           st.tuples(st.integers(min_value=0), st.sampled_from(("pid", "tid", "correlation")), st.just(2 ** 70)),
       ), min_size=1, max_size=5))
def test_kineto_damage_to_counted_data_is_never_silent(tmp_path_factory, which, edits):
    path = _write(_apply(which, edits), tmp_path_factory.mktemp("k") / "trace.json")
    summary = check_outcome(path)
    if summary is None:
        return
    before = sound(which, KINETO[which])
    same = all(summary[k] == before[k] for k in HEADLINE)
    assert same or summary["warnings"], {k: (before[k], summary[k]) for k in HEADLINE}


@SETTINGS
@given(which=st.sampled_from(sorted(KINETO)), cut=st.floats(min_value=0.0, max_value=1.0),
       flips=st.lists(st.tuples(st.floats(min_value=0.0, max_value=1.0), st.integers(min_value=1, max_value=255)),
                      max_size=4), gz=st.booleans())
def test_kineto_cut_or_flipped_bytes_are_never_a_traceback(tmp_path_factory, which, cut, flips, gz):
    raw = bytearray(gzip.compress(json.dumps(DOCS[which]).encode(), compresslevel=1) if gz
                    else json.dumps(DOCS[which]).encode())
    for where, xor in flips:
        raw[int(where * (len(raw) - 1))] ^= xor
    raw = raw[: max(1, int(cut * len(raw)))] if cut < 0.98 else raw
    path = tmp_path_factory.mktemp("b") / ("trace.json.gz" if gz else "trace.json")
    path.write_bytes(bytes(raw))
    check_outcome(path)


# ---- nsys ---------------------------------------------------------------------------------------------
TABLES = ("CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY",
          "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION", "NVTX_EVENTS", "StringIds",
          "ENUM_CUDA_MEMCPY_OPER", "ENUM_CUDA_MEM_KIND", "ENUM_NSYS_EVENT_TYPE", "ENUM_CUPTI_SYNC_TYPE")
cells = st.one_of(st.none(), st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1),
                  st.floats(allow_nan=False), st.text(max_size=8), st.binary(max_size=8))


@pytest.fixture(scope="module")
def nsys_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("nsys") / "sound.sqlite"
    with gzip.open(NSYS, "rb") as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def _damaged_db(nsys_db: Path, folder: Path, edits) -> Path:
    path = folder / "trace.sqlite"
    shutil.copy(nsys_db, path)
    db = sqlite3.connect(path)
    for table, action, row, column, value in edits:
        columns = [r[1] for r in db.execute(f"PRAGMA table_info({table})")]
        if not columns:
            continue
        rowids = [r[0] for r in db.execute(f"SELECT rowid FROM {table} ORDER BY rowid")]
        if action == "drop":
            db.execute(f"DROP TABLE {table}")
        elif action == "empty":
            db.execute(f"DELETE FROM {table}")
        elif rowids:
            try:
                db.execute(f'UPDATE {table} SET "{columns[column % len(columns)]}" = ? WHERE rowid = ?',
                           (value, rowids[row % len(rowids)]))
            except sqlite3.IntegrityError:  # a NOT NULL or UNIQUE column: nsys would not write that either
                pass
    db.commit()
    db.close()
    return path


@SETTINGS
@given(edits=st.lists(st.tuples(st.sampled_from(TABLES), st.sampled_from(("set", "set", "set", "drop", "empty")),
                                st.integers(min_value=0), st.integers(min_value=0), cells), min_size=1, max_size=6))
def test_nsys_any_cell_damage_is_never_a_traceback(nsys_db, tmp_path_factory, edits):
    check_outcome(_damaged_db(nsys_db, tmp_path_factory.mktemp("n"), edits))


@SETTINGS
@given(edits=st.lists(st.tuples(st.sampled_from(TABLES[:6]), st.just("set"), st.integers(min_value=0),
                                st.sampled_from((0, 1)),  # start, end: the first two columns of these tables
                                st.one_of(st.none(), st.text(min_size=1, max_size=5), st.binary(max_size=4),
                                          st.floats(allow_nan=False).filter(lambda v: not float(v).is_integer()))),
                      min_size=1, max_size=5))
def test_nsys_damaged_times_are_never_silent(nsys_db, tmp_path_factory, edits):
    for table, *_ in edits:  # the first two columns are start and end in each of these tables
        db = sqlite3.connect(nsys_db)
        assert [r[1] for r in db.execute(f"PRAGMA table_info({table})")][:2] == ["start", "end"], table
        db.close()
    summary = check_outcome(_damaged_db(nsys_db, tmp_path_factory.mktemp("n"), edits))
    if summary is None:
        return
    before = sound("nsys", NSYS)
    same = all(summary[k] == before[k] for k in HEADLINE)
    assert same or summary["warnings"], {k: (before[k], summary[k]) for k in HEADLINE}
