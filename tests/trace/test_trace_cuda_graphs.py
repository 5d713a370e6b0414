"""CUDA graphs in nsys exports: a replay traced whole is GPU time, not idle time.

The fixture is chapter 07's reference solution as the grader traced it with nsys on an H100 (its README says
which run): forward and backward replayed as CUDA graphs, each replay one row of CUPTI_ACTIVITY_KIND_GRAPH_TRACE,
its kernels absent from the kernel table. Before these rows were read, its report said "GPU idle 97% of step
time" for a solution that keeps the GPU busy.
"""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

import pytest

from checker.trace import load
from checker.cli import main
from trace_helpers import ROOT

FIXTURE = ROOT / "tests" / "data" / "traces" / "ch07" / "solution-nsys.sqlite.gz"
NODE_TRACED = ROOT / "tests" / "data" / "traces" / "ch07" / "solution-node-nsys.sqlite.gz"
LAB = ROOT / "tests" / "data" / "traces" / "ch07" / "lab-nsys.sqlite.gz"


@pytest.fixture
def sqlite_copy(tmp_path):
    """The fixture unpacked, for tests that alter it."""
    path = tmp_path / "07-solution.sqlite"
    with gzip.open(FIXTURE) as src, open(path, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return path


def _graph_rows(trace):
    events = trace.events
    return events[(events["kind"] == "kernel") & events["name"].astype(str).str.startswith("CUDA graph ")]


def test_whole_graph_replays_count_as_gpu_time(capsys):
    trace = load(FIXTURE)
    graphs = _graph_rows(trace)
    assert len(graphs) == 20  # every row of CUPTI_ACTIVITY_KIND_GRAPH_TRACE: two graphs, ten replays each
    assert set(graphs["name"].astype(str)) == {"CUDA graph 4", "CUDA graph 7"}
    summary = trace.summary(exclude_steps=(39,))
    assert summary["gpu_idle_fraction"] < 0.2, summary["gpu_idle_fraction"]
    families = trace.get_kernel_families(exclude_steps=(39,))
    assert "CUDA graph" in set(families["family"].astype(str))
    assert main(["report", str(FIXTURE), "--chapter", "07"]) == 0
    out = capsys.readouterr().out
    first = next(line.strip() for line in out.splitlines() if line.strip().startswith("1. "))
    assert first.startswith("1. GPU busy") and "--cuda-graph-trace=node" in first
    assert "Nsight Compute on it is next" not in out  # a whole graph is not one kernel to profile
    assert "18 CUDA graph replays were traced as whole graphs" in out  # steps 30-38; 39 is a logging step


def test_node_traced_kernels_are_not_counted_twice(sqlite_copy):
    """With --cuda-graph-trace=node the kernels inside a replay carry a graph node id: a whole-graph row with such a
    kernel inside it is left out rather than counted beside its own kernels; the other replays still count. One
    stray node id on a kernel outside every replay leaves all of them in place."""
    with sqlite3.connect(sqlite_copy) as db:
        columns = [row[1] for row in db.execute("PRAGMA table_info(CUPTI_ACTIVITY_KIND_KERNEL)")]
        copied = ", ".join({"start": "g.start + 1", "end": "g.start + 2", "graphNodeId": "7",
                            "deviceId": "g.deviceId"}.get(c, f"k.{c}") for c in columns)
        db.execute(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({', '.join(columns)}) SELECT {copied} FROM "
                   "CUPTI_ACTIVITY_KIND_KERNEL k, CUPTI_ACTIVITY_KIND_GRAPH_TRACE g WHERE k.rowid = 1 AND g.rowid = 1")
    assert len(_graph_rows(load(sqlite_copy))) == 19
    with sqlite3.connect(sqlite_copy) as db:
        db.execute("DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE graphNodeId = 7")
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = 1 WHERE rowid = 1")  # before any replay
    assert len(_graph_rows(load(sqlite_copy))) == 20


def test_a_damaged_graph_row_is_left_out_with_a_warning(sqlite_copy, capsys):
    with sqlite3.connect(sqlite_copy) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_GRAPH_TRACE SET start = 'garbage' WHERE rowid = "
                   "(SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_GRAPH_TRACE)")
    trace = load(sqlite_copy)
    assert len(_graph_rows(trace)) == 19
    assert main(["report", str(sqlite_copy), "--json"]) == 0
    warnings = json.loads(capsys.readouterr().out)["warnings"]
    assert any("CUPTI_ACTIVITY_KIND_GRAPH_TRACE" in w for w in warnings), warnings


def test_the_graders_nsys_traces_graphs_kernel_by_kernel(tmp_path):
    """The grader's own nsys runs list each graph's kernels, so no count of kernels can be dodged by replaying them
    in a CUDA graph; the whole-graph rows above are for traces a learner took without the flag."""
    from checker.grader.runs import nsys_profile

    command = nsys_profile("/opt/nsys", tmp_path / "trace")
    assert command[:2] == ["/opt/nsys", "profile"] and "--cuda-graph-trace=node" in command
    assert command[-2:] == ["-o", str(tmp_path / "trace")]


@pytest.mark.parametrize("column, replays", [("graphId", 20), ("streamId", 0)])
def test_a_graph_table_short_of_a_column_costs_only_what_it_must(sqlite_copy, column, replays):
    """The graph table is optional: without graphId its replays are still GPU time (named "(no id)"); without a
    column every GPU row needs, they are left out with a warning, and the rest of the export is still read."""
    with sqlite3.connect(sqlite_copy) as db:
        db.execute(f"ALTER TABLE CUPTI_ACTIVITY_KIND_GRAPH_TRACE DROP COLUMN {column}")
    trace = load(sqlite_copy)
    graphs = _graph_rows(trace)
    assert len(graphs) == replays and trace.summary()["steps"] == 10
    if replays:
        assert set(graphs["name"].astype(str)) == {"CUDA graph (no id)"}
    else:
        assert any("has no streamId column" in w for w in trace.warnings)


def test_an_event_that_outlasts_the_trace_by_ages_is_taken_as_damage(sqlite_copy, capsys):
    """One kernel whose end is int64's largest value made every GPU-time share absurd (billions of percent)."""
    with sqlite3.connect(sqlite_copy) as db:
        db.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = 9223372036854775807 WHERE rowid = 5")
    assert main(["report", str(sqlite_copy), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert any("last far longer than the whole trace" in w for w in summary["warnings"])
    assert all(k["share"] <= 1.0 for k in summary["top_kernels"])


def test_a_node_traced_solution_lists_the_kernels_inside_its_graphs(capsys):
    """The grader's nsys since session 39 (--cuda-graph-trace=node), on an H100: the same solution, each kernel of
    each replay a row of its own with a graph node id, no whole-graph rows. The report reads it as the busy GPU it
    is, with the kernels named, and says nothing about whole-graph rows; against the lab's trace (the slow
    script's patterns, same grader) the changes are the ones the chapter teaches."""
    trace = load(NODE_TRACED)
    assert _graph_rows(trace).empty
    summary = trace.summary(exclude_steps=(39,))
    assert summary["kernels_per_step"] > 10 * summary["launches_per_step"]  # replays launch many kernels at once
    assert summary["gpu_idle_fraction"] < 0.2 and summary["host_syncs_per_step"] == 0
    assert summary["pageable_h2d_per_step"] == 0 and summary["pinned_h2d_copies"] > 0
    families = trace.get_kernel_families(exclude_steps=(39,)).set_index("family")["count"]
    assert families["CUDA graph"] == 0 and families["gemm/conv"] > 0
    lab = load(LAB).summary(exclude_steps=(39,))
    assert lab["host_syncs_per_step"] == 5 and lab["pageable_h2d_per_step"] == 2
    assert lab["data_wait_fraction"] > 0.5 and lab["step_ms_median"] > 10 * summary["step_ms_median"]
    assert main(["report", str(NODE_TRACED), "--baseline", str(LAB), "--chapter", "07"]) == 0
    out = capsys.readouterr().out
    assert "--cuda-graph-trace=node" not in out and "traced as whole graphs" not in out
    assert "host syncs per step: 5 -> 0" in out and "pageable HtoD copies per step: 2 -> 0" in out
    # chapter 07's page quotes these two lines
    assert "kernels per step: 624 -> 335" in out and "kernel launches per step: 624 -> 27" in out
    assert "sm90_xmma_" in out  # the tensor-core convolutions inside the graphs, by name
