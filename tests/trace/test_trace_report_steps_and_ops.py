"""`workbook report` as the checks count: CPU-resident scalar reads are no host syncs, logging steps left out
(--log-every, --chapter), and the top CPU ops by self time and by count."""

from __future__ import annotations

import json

import pytest

from checker.trace import load
from checker.cli import main
from trace_helpers import cpu_trace_path, make_events

torch = pytest.importorskip("torch")


def profile_steps(tmp_path, step_fn, steps: int = 4, with_stack: bool = True):
    """Run step_fn(step) for a few steps under torch.profiler on the CPU, each in a `step N` range."""
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], with_stack=with_stack) as prof:
        for step in range(steps):
            with record_function(f"step {step}"):
                step_fn(step)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return path


def training(optimizer_kwargs: dict, read_loss_every: int | None = None, optimizer_cls=None):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    optimizer = (optimizer_cls or torch.optim.AdamW)(model.parameters(), lr=1e-3, **optimizer_kwargs)
    x = torch.randn(4, 8)

    def step(s):
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if read_loss_every and (s + 1) % read_loss_every == 0:
            loss.item()  # a logging step reads the loss
    return step


@pytest.mark.parametrize("kwargs", [{"foreach": False}, {"foreach": True}, {"fused": True}], ids=str)
@pytest.mark.parametrize("with_stack", [True, False], ids=["frames", "no-frames"])
def test_optimizer_step_counter_reads_are_no_host_syncs(tmp_path, kwargs, with_stack):
    trace = load(profile_steps(tmp_path, training(kwargs), with_stack=with_stack))
    raw = trace.events[(trace.events["kind"] == "cpu_op") & (trace.events["name"] == "aten::_local_scalar_dense")]
    assert len(raw) >= 4 or kwargs == {"fused": True}  # the reads are in the trace ...
    summary = trace.summary()
    assert summary["host_syncs_in_steps"] == 0  # ... and none is a host sync
    if len(raw):
        assert any("CPU-resident scalars" in n for n in summary["notes"])


def test_a_loss_read_is_still_a_host_sync_beside_the_optimizer(tmp_path):
    trace = load(profile_steps(tmp_path, training({"foreach": False}, read_loss_every=1)))
    assert trace.summary()["host_syncs_in_steps"] == 4


class ReadsAGradient(torch.optim.SGD):
    """A custom optimizer whose step reads a tensor: on a GPU that tensor is on the GPU, so it syncs."""

    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.norm().item()
        return super().step(closure)


@pytest.mark.parametrize("with_stack", [True, False], ids=["frames", "no-frames"])
def test_reads_inside_a_custom_optimizer_still_count(tmp_path, with_stack):
    step = training({}, optimizer_cls=ReadsAGradient)
    trace = load(profile_steps(tmp_path, step, with_stack=with_stack))
    assert trace.summary()["host_syncs_in_steps"] == 4 * 2  # weight and bias, every step


def test_log_every_leaves_the_logging_steps_out(tmp_path, capsys):
    path = profile_steps(tmp_path, training({"foreach": False}, read_loss_every=2))
    assert main(["report", "--json", str(path)]) == 0
    counted_all = json.loads(capsys.readouterr().out)
    assert counted_all["host_syncs_in_steps"] == 2 and counted_all["logging_steps_excluded"] == []
    assert main(["report", "--json", "--log-every", "2", str(path)]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["logging_steps_excluded"] == [1, 3] and summary["step_numbers"] == [0, 2]
    assert summary["host_syncs_in_steps"] == 0 and summary["steps"] == 2
    assert main(["report", str(path), "--log-every", "2"]) == 0
    assert "2 logging steps left out" in capsys.readouterr().out


def test_chapter_gives_its_log_every(tmp_path, capsys):
    from checker.base.chapters import all_chapters

    chapter = next(c for c in all_chapters() if int(c.config("cpu").get("log_every", 0)) > 0)
    log_every = int(chapter.config("cpu")["log_every"])
    path = profile_steps(tmp_path, lambda s: torch.ones(2).sum(), steps=log_every + 1)
    assert main(["report", "--json", "--chapter", chapter.id, str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["logging_steps_excluded"] == [log_every - 1]
    assert main(["report", "--chapter", "no_such_chapter", str(path)]) == 2
    assert "unknown chapter" in capsys.readouterr().err


def test_every_step_a_logging_step_is_one_line(tmp_path, capsys):
    path = profile_steps(tmp_path, lambda s: torch.ones(2).sum(), steps=2)
    assert main(["report", "--log-every", "1", str(path)]) == 2
    assert "no step is left to count" in capsys.readouterr().err


def test_self_time_is_the_op_less_the_ops_directly_inside_it():
    events = make_events([
        {"kind": "range", "name": "step 0", "start_ns": 0, "end_ns": 1000, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::linear", "start_ns": 100, "end_ns": 500, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::addmm", "start_ns": 150, "end_ns": 350, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::copy_", "start_ns": 200, "end_ns": 260, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::relu", "start_ns": 600, "end_ns": 700, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::relu", "start_ns": 800, "end_ns": 850, "pid": 1, "tid": 1},
    ])
    from checker.trace.analysis import TraceAnalysis

    trace = TraceAnalysis(events, "kineto", source="hand-made")
    ops = trace.get_top_ops().set_index("name")
    assert ops.loc["aten::linear", "self_ns"] == 400 - 200
    assert ops.loc["aten::addmm", "self_ns"] == 200 - 60
    assert ops.loc["aten::relu", "self_ns"] == 150 and ops.loc["aten::relu", "count"] == 2
    assert trace.get_top_ops(sort_by="count")["name"].iloc[0] == "aten::relu"
    cpu_ops = trace.get_cpu_ops().set_index("name")
    assert cpu_ops["top_level"].to_dict() == {"aten::linear": True, "aten::addmm": False, "aten::copy_": False,
                                              "aten::relu": True}


def test_report_prints_the_top_ops(capsys):
    assert main(["report", str(cpu_trace_path("pageable_item"))]) == 0
    out = capsys.readouterr().out
    assert "Top CPU ops by self time" in out
    assert main(["report", "--json", str(cpu_trace_path("pageable_item"))]) == 0
    summary = json.loads(capsys.readouterr().out)
    by_self = [op["self_ms_per_step"] for op in summary["top_ops"]]
    by_count = [op["count_per_step"] for op in summary["top_ops_by_count"]]
    assert 0 < len(by_self) <= 15 and by_self == sorted(by_self, reverse=True)
    assert by_count == sorted(by_count, reverse=True)
    assert all(op["self_ms_per_step"] <= op["total_ms_per_step"] + 1e-9 for op in summary["top_ops"])


def test_a_count_of_a_steps_work_sees_what_ran_between_two_ranges():
    """Ops between two steps' ranges are the window's: the op counts give them to the step before (steps.fill_gaps);
    before the first range and after the last one nothing is counted."""
    events = make_events([
        {"kind": "cpu_op", "name": "aten::mul", "start_ns": 10, "end_ns": 20, "pid": 1, "tid": 1},  # before
        {"kind": "range", "name": "step 0", "start_ns": 100, "end_ns": 200, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::add", "start_ns": 110, "end_ns": 120, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::gelu", "start_ns": 210, "end_ns": 220, "pid": 1, "tid": 1},  # between
        {"kind": "cpu_op", "name": "aten::sigmoid", "start_ns": 230, "end_ns": 240, "pid": 1, "tid": 7},  # between
        {"kind": "range", "name": "step 1", "start_ns": 300, "end_ns": 400, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::add", "start_ns": 310, "end_ns": 320, "pid": 1, "tid": 1},
        {"kind": "cpu_op", "name": "aten::mul", "start_ns": 410, "end_ns": 420, "pid": 1, "tid": 1},  # after
    ])
    from checker.trace.analysis import TraceAnalysis

    trace = TraceAnalysis(events, "kineto", source="hand-made")
    assert trace.events["step"].isna().sum() == 4  # a step's own range holds only its own ops
    counted = trace.count_elementwise("cpu")
    assert (counted.total, counted.steps) == (4, 2)
    assert dict(counted.top) == {"aten::add": 1.0, "aten::gelu": 0.5, "aten::sigmoid": 0.5}
    assert trace.count_launches("cpu").total == 4
