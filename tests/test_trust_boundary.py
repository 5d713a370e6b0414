"""The grader's side of the trust boundary, piece by piece: the channel and clock, the run's sandbox, the
referee, the trace's agreement with the grader's stamps, and the source scan."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from checker.grader import forkserver, sandbox
from checker.base.chapters import get_chapter
from checker.grader.collect import trace_problem
from checker.grader.referee import distance
from checker.grader.runs import IncompleteWork, ScriptError, run_script
from checker.base.scan import findings
from checker.trace.analysis import TraceAnalysis
from checker.trace.events import finish

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = get_chapter("01_item_syncs")
HEAD = 'from checker.lab import start\nsession = start("01_item_syncs")\n'
LOOP = "for step, batch in session.steps(session.batches):\n    pass\nsession.finish()\n"


def _host_reads_session(**state):
    """A stand-in for the harness's session in a CPU chapter that counts host reads (not op counts): what its
    audit hooks and tensor watches read."""
    from types import SimpleNamespace

    return SimpleNamespace(_counts_views=True, _counts_crossings=False, _watches_memory=True, **state)


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(body))
    return path


def run(path: Path, **kwargs):
    return run_script(CHAPTER, path, "cpu", steps=kwargs.pop("steps", 7), seed=11, window_key=22, **kwargs)


# -- the channel and the clock -------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_grader_times_the_window_and_gets_the_weights(tmp_path):
    result = run(script(tmp_path, HEAD + LOOP))
    assert result.weights and result.window_s > 0 and len(result.step_ms) == 2  # steps 5 and 6 of 7
    assert result.seed == 11 and result.window_key == 22
    assert set(result.phases_s) >= {"start-up", "build", "warm-up", "timed"}


@pytest.mark.slow
def test_work_after_the_loop_is_inside_the_window_only_until_the_weights_arrive(tmp_path):
    """Sleeping after the loop does not shorten the window; sleeping inside it lengthens it."""
    slow = run(script(tmp_path, HEAD + "import time\nfor step, batch in session.steps(session.batches):\n"
                                 "    time.sleep(0.3 if step >= 5 else 0)\nsession.finish()\n"))
    assert slow.window_s >= 0.6


@pytest.mark.slow
@pytest.mark.parametrize("body, said", [
    (HEAD + "for step, batch in session.steps(session.batches):\n    break\nsession.finish()\n", IncompleteWork),
    ("raise SystemExit(3)\n", ScriptError),
    ("print('no harness')\n", ScriptError),
])
def test_a_run_that_does_not_finish_its_steps_says_so(tmp_path, body, said):
    with pytest.raises(said):
        run(script(tmp_path, body))


@pytest.mark.slow
def test_a_forged_message_ends_the_run(tmp_path):
    body = HEAD + textwrap.dedent("""
        from checker.candidate import session as harness
        harness.LAUNCH.channel.send({"type": "step", "n": 99})
    """) + LOOP
    with pytest.raises(ScriptError, match="reported step 99"):
        run(script(tmp_path, body))


@pytest.mark.slow
def test_weights_handed_to_another_process_end_the_run(tmp_path):
    """Pickled for another process (a spawned loader worker's dataset holding the model), a CPU tensor's storage moves
    to shared memory in place: that process could train it where no trace looks."""
    body = HEAD + textwrap.dedent("""
        from multiprocessing.reduction import ForkingPickler
        import torch.multiprocessing
        handed = ForkingPickler.dumps(session.model.state_dict())
    """) + LOOP
    with pytest.raises(ScriptError, match="in shared memory"):
        run(script(tmp_path, body))


@pytest.mark.slow
def test_the_weights_are_read_without_the_models_methods_or_hooks(tmp_path):
    """After the last step's range has closed nothing the script wrote may run: red team 23 trained the window's
    batches again in an override of state_dict or named_parameters, or in a state-dict hook, each called by the
    harness as it read the weights. Here each of them zeroes the weights instead: none runs, so none is zeroed."""
    body = HEAD + textwrap.dedent("""
        import torch
        params = list(session.model.parameters())
        def zero(*args, **kwargs):
            with torch.no_grad():
                for tensor in params:
                    tensor.zero_()
        def zeroed_state(*args, **kwargs):
            zero()
            return torch.nn.Module.state_dict(session.model, *args, **kwargs)
        def zeroed_parameters(*args, **kwargs):
            zero()
            return torch.nn.Module.named_parameters(session.model, *args, **kwargs)
        session.model.state_dict = zeroed_state
        session.model.named_parameters = zeroed_parameters
        session.model.register_state_dict_pre_hook(zero)
        session.model._register_state_dict_hook(zero)
    """) + LOOP
    weights = torch.load(io.BytesIO(run(script(tmp_path, body)).weights), map_location="cpu", weights_only=True)
    floats = [tensor for tensor in weights.values() if tensor.is_floating_point()]
    assert floats and any(bool(tensor.abs().sum() > 0) for tensor in floats)


def test_the_harness_walks_a_model_as_state_dict_names_it_without_running_its_code():
    """model_tensors reads the modules' own tables: the names and order of state_dict (non-persistent buffers left
    out, a parametrization's original kept), and not one of the model's methods runs, overridden or not."""
    from torch.nn.utils import parametrize

    from checker.candidate.session import model_tensors

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.first = torch.nn.Linear(3, 3)
            self.body = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))
            self.register_buffer("scratch", torch.ones(1), persistent=False)
            self.again = self.first  # one module under two names, as state_dict lists it

    model = Model()
    parametrize.register_parametrization(model.first, "weight", torch.nn.Identity())
    expected = list(model.state_dict())

    def trap(self, name):
        if name != "__dict__":
            raise AssertionError(f"the walk looked up {name} on the model")
        return object.__getattribute__(self, name)

    Model.__getattribute__ = trap
    assert [name for name, _ in model_tensors(model, persistent=True)] == expected
    assert [name for name, _ in model_tensors(model)] == ["scratch", *expected]


@pytest.mark.slow
def test_the_window_opens_without_the_scripts_code(tmp_path):
    """Red team 24 trained the window's batches in a callback of its own put in the workload's place, which the
    harness called with the window key before the first step's range (and the head was re-drawn through the
    model's named_parameters). The harness calls the callback the workload was built with and walks the model
    itself: neither replacement below runs."""
    body = HEAD + textwrap.dedent("""
        def boom(*args, **kwargs):
            raise SystemExit("the harness ran the script's code as the window opened")

        session.workload.on_window = boom
        session.model.named_parameters = boom
        session.model.named_modules = boom
    """) + LOOP
    result = run(script(tmp_path, body))
    assert result.window_s is not None


@pytest.mark.slow
@pytest.mark.parametrize("replace", ["torch.Tensor.detach = lambda self: self", "torch.save = print",
                                     "import copyreg; copyreg.dispatch_table[torch.Tensor] = lambda t: (list, ())",
                                     "import torch.serialization as s; s._cpu_tag.__code__ = (lambda obj: None).__code__",
                                     "torch.serialization.register_package(0, lambda o: None, lambda o, l: None)"])
def test_replacing_what_reads_the_weights_ends_the_run(tmp_path, replace):
    body = HEAD + f"import torch\n{replace}\n" + LOOP
    with pytest.raises(ScriptError, match="reads the trained weights with"):
        run(script(tmp_path, body))


@pytest.mark.slow
def test_a_run_that_prints_without_end_is_stopped_and_the_grader_keeps_only_a_tail(tmp_path):
    body = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    with pytest.raises(ScriptError, match="printed more than"):
        run(script(tmp_path, body))


@pytest.mark.slow
def test_a_hang_is_stopped_at_the_time_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("WORKBOOK_TIMEOUT_S", "4")
    with pytest.raises(ScriptError, match="did not finish within 4 s"):
        run(script(tmp_path, "import time\nprint('waiting')\ntime.sleep(60)\n"))


@pytest.mark.slow
def test_a_process_left_running_is_killed_and_counted(tmp_path):
    body = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(120)
            os._exit(0)
    """) + HEAD + LOOP
    forkserver.server()  # the grader's fork server outlives every run, by design: started before the count
    before = sandbox.descendants(os.getpid())
    # on a CPU the window's work is counted over the run's processes: one that left the run before the window (an
    # orphan the grader adopted) ends it at the window's open (red team 36's orphan_key_04)
    with pytest.raises(ScriptError, match="outside the run"):
        run(script(tmp_path, body))
    assert not _left_by_runs(before)  # nothing of the run is left


@pytest.mark.slow
def test_a_process_left_running_after_the_window_is_killed_and_counted(tmp_path):
    body = HEAD + LOOP.replace("session.finish()\n", "") + textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                time.sleep(120)
            os._exit(0)
        time.sleep(0.5)  # the grandchild is made before the run says it is done
        session.finish()
    """)
    forkserver.server()
    before = sandbox.descendants(os.getpid())
    result = run(script(tmp_path, body))
    assert result.survivors >= 1
    assert not _left_by_runs(before)  # nothing of the run is left


def _left_by_runs(before: set[int]) -> set[int]:
    """This process's descendants now that were not there ``before``, the fork server's own aside (a server started
    in this test may still be making its own helpers)."""
    server = forkserver.server()
    own = sandbox.descendants(server.proc.pid) | {server.proc.pid} if server is not None else set()
    return {pid for pid in sandbox.descendants(os.getpid()) - before - own if sandbox._alive(pid)}


@pytest.mark.slow
def test_the_run_sees_only_its_own_folder_and_no_module_beside_the_lab(tmp_path):
    (tmp_path / "json.py").write_text("raise SystemExit('shadowed')\n")
    body = HEAD + textwrap.dedent("""
        import json, os, sys, tempfile
        assert os.environ["HOME"].startswith(os.getcwd()) and tempfile.gettempdir().startswith(os.getcwd())
        assert not any(k.startswith("PYTHON") and k not in ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE") for k in os.environ)
        assert os.listdir(os.getcwd()) == sorted(os.listdir(os.getcwd())) or True
        assert not os.path.exists("json.py") and sys.flags.isolated
    """) + LOOP
    assert run(script(tmp_path, body)).weights


def test_the_memory_cap_is_only_for_cpu_runs_and_comes_from_the_chapter():
    assert sandbox.Limits().memory_mb is None


# -- the referee -------------------------------------------------------------------------------------------
def test_distance_is_zero_for_the_same_training_and_large_for_an_untrained_layer():
    start = {"a": torch.zeros(4, 4), "b": torch.zeros(4)}
    baseline = {"a": torch.ones(4, 4), "b": torch.ones(4), "count": torch.tensor(7)}
    assert distance(dict(baseline), baseline, start)["relative"] == 0.0
    untrained = {"a": torch.ones(4, 4), "b": torch.zeros(4), "count": torch.tensor(7)}
    far = distance(untrained, baseline, start)
    assert far["worst_tensor_name"] == "b" and far["worst_tensor"] == pytest.approx(1.0)
    fewer = distance(dict(baseline, count=torch.tensor(3)), baseline, start)
    assert fewer["counts_differ"] == ["count"]


# -- the trace against the grader's stamps ---------------------------------------------------------------
class Stamped:
    def __init__(self, span_ms: float):
        self.trace_stamps_ns = [0, int(span_ms * 1e6)]  # the traced steps as the grader stamped them


def trace_of(steps, op_in=None, step_ms=10, covered=0.6, python_in_op=None):
    """Steps of step_ms each, with one aten op covering ``covered`` of each step (in ``op_in`` steps only)."""
    rows = []
    for index, step in enumerate(steps):
        start = index * step_ms * 1_000_000
        rows.append({"kind": "range", "name": f"step {step}", "start_ns": start, "end_ns": start + step_ms * 1_000_000,
                     "pid": 1, "tid": 1})
        if op_in is None or step in op_in:
            end = start + 10 + int(covered * step_ms * 1_000_000)
            rows.append({"kind": "cpu_op", "name": "aten::mm", "start_ns": start + 10, "end_ns": end, "pid": 1, "tid": 1})
            rows.append({"kind": "python", "name": "train.py(9): train_step", "start_ns": start + 1, "end_ns": end + 5,
                         "pid": 1, "tid": 1})  # Python calling the op: the usual nesting
            if python_in_op:
                rows.append({"kind": "python", "name": python_in_op, "start_ns": start + 20, "end_ns": start + 30,
                             "pid": 1, "tid": 1})
    return TraceAnalysis(finish(pd.DataFrame(rows)), fmt="fabricated", source="test")


def test_a_trace_of_the_steps_the_harness_ran_is_believed():
    assert trace_problem(trace_of([5, 6, 7]), Stamped(30), first_step=5, trace_steps=3, device="cpu") is None


def test_extra_step_ranges_make_the_trace_unbelievable():
    assert "added, removed or renamed" in trace_problem(trace_of([5, 6, 7, 1000]), Stamped(40), 5, 3, "cpu")


def test_a_trace_spanning_other_times_than_the_run_is_not_its_record():
    assert "not the record" in trace_problem(trace_of([5, 6, 7]), Stamped(900), 5, 3, "cpu")


def test_a_gpu_bound_trace_ends_where_its_kernels_end():
    """The grader's last stamp follows the harness's sync: a run whose host launched three steps in 30 ms while their
    kernels ran until 130 ms is the record of a run the grader saw take 130 ms (an honest lab of chapter 05 was once
    refused for it); with no kernels that late, the same stamps still mark the trace as another run's."""
    host = trace_of([5, 6, 7]).events
    rows = []
    for index, step in enumerate((5, 6, 7)):
        launch = index * 10_000_000 + 100
        rows.append({"kind": "cuda_api", "name": "cudaLaunchKernel", "start_ns": launch, "end_ns": launch + 50,
                     "pid": 1, "tid": 1, "correlation": 100 + step})
        rows.append({"kind": "kernel", "name": "elementwise_kernel", "start_ns": (index + 1) * 40_000_000,
                     "end_ns": (index + 1) * 40_000_000 + 10_000_000, "pid": 1, "tid": 7, "device": 0, "stream": 7,
                     "correlation": 100 + step})
    both = finish(pd.concat([host.drop(columns=["step"]), pd.DataFrame(rows)], ignore_index=True))
    gpu_bound = TraceAnalysis(both, fmt="fabricated", source="test")
    assert trace_problem(gpu_bound, Stamped(130), 5, 3, "cuda") is None
    assert "not the record" in trace_problem(trace_of([5, 6, 7]), Stamped(130), 5, 3, "cuda")


def test_a_step_without_work_is_a_failure_not_infinitely_fewer():
    assert "no work in step(s) 6" in trace_problem(trace_of([5, 6, 7], op_in={5, 7}), Stamped(30), 5, 3, "cpu")


@pytest.mark.parametrize("covered, believed", [(0.6, True), (0.2, True), (0.1, False), (0.01, False)])
def test_on_a_cpu_recorded_ops_must_account_for_the_step(covered, believed):
    """Work the profiler did not see (recording off, a forked process, numpy) leaves the step's time bare; a
    CPU grades no speed, so nothing else would make that work cost the submission anything."""
    problem = trace_problem(trace_of([5, 6, 7], covered=covered), Stamped(30), 5, 3, "cpu")
    assert (problem is None) == believed, problem
    if not believed:
        assert f"only {covered:.0%} of each step's time" in problem
    assert trace_problem(trace_of([5, 6, 7], covered=0.01), Stamped(30), 5, 3, "cuda") is None  # the clock backs it


def test_on_a_cpu_an_aten_op_that_runs_a_model_hides_the_step():
    inside = "torch/nn/modules/module.py(1750): _call_impl"
    problem = trace_problem(trace_of([5, 6, 7], python_in_op=inside), Stamped(30), 5, 3, "cpu")
    assert "holds aten::mm running the training's Python code (1 calls of a model" in problem


@pytest.mark.parametrize("inside", ["einops/stephelper.py(30): train", "torch/stephelper.py(30): train",
                                    "/tmp/lib/site-packages/einops/stephelper.py(30): train"])
def test_on_a_cpu_any_python_but_torchs_or_pythons_own_inside_an_op_hides_the_step(inside):
    """A step run inside an op's dispatch (a tensor subclass's __torch_dispatch__) from a module the run wrote
    under a library's name, or under a folder named torch: no such file is that library's or torch's as installed,
    and an aten op runs no other Python, so the trace's counts are not the step's (red team 12's nested steps)."""
    problem = trace_problem(trace_of([5, 6, 7], python_in_op=inside), Stamped(30), 5, 3, "cpu")
    assert problem and "running the training's Python code" in problem


@pytest.mark.parametrize("inside", ["traceback.py(376): extract_stack", "torch/utils/checkpoint.py(1120): pack_hook"])
def test_pytorchs_own_python_inside_an_op_is_not_hidden_work(inside):
    """Anomaly mode records a traceback inside each op; activation checkpointing runs its hooks inside ops."""
    assert trace_problem(trace_of([5, 6, 7], python_in_op=inside), Stamped(30), 5, 3, "cpu") is None


def with_rows(trace: TraceAnalysis, rows: list[dict]) -> TraceAnalysis:
    """The trace with more events, each placed in a step by its time."""
    events = trace.events[["kind", "name", "start_ns", "end_ns", "pid", "tid"]]
    added = pd.DataFrame([dict(row, pid=1, tid=1) for row in rows])
    return TraceAnalysis(finish(pd.concat([events, added], ignore_index=True)), fmt="fabricated", source="test")


def in_each_step(kind: str, name: str, offset_us: int, length_us: int) -> list[dict]:
    return [{"kind": kind, "name": name, "start_ns": index * 10_000_000 + offset_us * 1000,
             "end_ns": index * 10_000_000 + (offset_us + length_us) * 1000} for index in range(3)]


@pytest.mark.parametrize("record", ["autograd::engine::evaluate_function: MulBackward0", "Optimizer.step#AdamW.step"])
def test_on_a_cpu_a_backward_or_an_optimizer_step_inside_an_aten_op_hides_the_step(record):
    """A hook run inside an op's dispatch (autograd's saved-tensor hooks run while the op saves its inputs) nests
    a whole backward or optimizer step under one top-level op, where the top-level counts miss every op of it
    (red team 19: chapter 05's elementwise ops counted 2.5x fewer, chapter 04's launches 7.9x). The same record
    outside any aten op is a step's own backward or optimizer step."""
    nested = with_rows(trace_of([5, 6, 7]), in_each_step("cpu_op", record, 100, 50))
    problem = trace_problem(nested, Stamped(30), 5, 3, "cpu")
    assert problem and "backward pass or an optimizer's step inside aten::mm" in problem and "in step 5" in problem
    alongside = with_rows(trace_of([5, 6, 7]), in_each_step("cpu_op", record, 7000, 500))
    assert trace_problem(alongside, Stamped(30), 5, 3, "cpu") is None


def test_on_a_cpu_operators_called_back_from_python_inside_an_aten_op_hide_work():
    """Python run inside an op that calls other operators (a hook or a dispatch mode doing a step's work) nests them
    out of the top-level counts' sight, under torch's own frames too (red team 20 ran a chain inside activation
    checkpointing's dispatch mode). What such Python may run: the op itself again (the checkpointing mode re-runs
    each op it is handed) with its own inner ops, and ops that do no work (detach, views, allocations)."""
    def hooked(frame: str, op: str = "aten::layer_norm", inside: str | None = None) -> TraceAnalysis:
        rows = in_each_step("python", frame, 100, 200) + in_each_step("cpu_op", op, 150, 100)
        if inside:
            rows += in_each_step("cpu_op", inside, 160, 50)
        return with_rows(trace_of([5, 6, 7]), rows)
    problem = trace_problem(hooked("<built-in function layer_norm>"), Stamped(30), 5, 3, "cpu")
    assert problem and "3 op(s) called from Python inside aten::mm (the first: aten::layer_norm" in problem
    checkpoint = "torch/utils/checkpoint.py(1500): __torch_dispatch__"
    assert "called from Python inside aten::mm" in trace_problem(hooked(checkpoint), Stamped(30), 5, 3, "cpu")
    assert trace_problem(hooked(checkpoint, "aten::mm", inside="aten::copy_"), Stamped(30), 5, 3, "cpu") is None
    assert trace_problem(hooked(checkpoint, "aten::detach"), Stamped(30), 5, 3, "cpu") is None
    bare = with_rows(trace_of([5, 6, 7]), in_each_step("cpu_op", "aten::empty", 150, 100))  # an op's own inner op
    assert trace_problem(bare, Stamped(30), 5, 3, "cpu") is None


def after_the_steps(rows: list[tuple]) -> TraceAnalysis:
    """trace_of's three steps, then host events after the last step's range closed (at 30 ms), as (kind, name,
    offset in microseconds, length in microseconds, thread)."""
    return TraceAnalysis(finish(pd.concat([
        trace_of([5, 6, 7]).events[["kind", "name", "start_ns", "end_ns", "pid", "tid"]],
        pd.DataFrame([{"kind": kind, "name": name, "start_ns": 30_000_000 + offset * 1000,
                       "end_ns": 30_000_000 + (offset + length) * 1000, "pid": 1, "tid": tid}
                      for kind, name, offset, length, tid in rows])], ignore_index=True)), fmt="fabricated", source="test")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_after_the_last_step_only_the_harness_copies_of_the_weights_run(device):
    """Red team 23 trained the window's batches again in a hook the harness ran while it read the weights: after
    the last step's range, where no count looks. There the harness only copies tensors (and a DataLoader's
    pin-memory thread pins batches it fetched ahead); anything else, on any thread, fails the trace."""
    copies = [("cpu_op", "aten::to", 10, 50, 1), ("cpu_op", "aten::_to_copy", 11, 40, 1),
              ("cpu_op", "aten::empty_strided", 12, 1, 1), ("cpu_op", "aten::copy_", 20, 20, 1),
              ("cpu_op", "detach", 5, 1, 1), ("cpu_op", "aten::cat", 70, 10, 1),
              ("cuda_api", "cudaLaunchKernel", 72, 2, 1), ("cuda_api", "cudaMemcpyAsync", 25, 5, 1),
              ("cpu_op", "aten::pin_memory", 10, 30, 2), ("python", "train.py(40): state_dict", 1, 99, 1),
              ("cpu_op", "aten::set_", 12, 1, 2),  # the pin-memory thread rebuilding a prefetched batch
              ("cpu_op", "aten::reshape", 80, 9, 1), ("cpu_op", "aten::clone", 81, 7, 1),  # a channels-last weight
              ("cpu_op", "aten::empty_like", 82, 1, 1), ("cpu_op", "aten::_unsafe_view", 88, 1, 1)]  # made flat
    assert trace_problem(after_the_steps(copies), Stamped(30), 5, 3, device) is None
    replay = copies + [("cpu_op", "aten::linear", 100, 50, 1),
                       ("cpu_op", "autograd::engine::evaluate_function: MmBackward0", 200, 50, 3)]
    problem = trace_problem(after_the_steps(replay), Stamped(30), 5, 3, device)
    assert problem and "runs 2 operator(s) after its last step's range closed" in problem
    graph = copies + [("cuda_api", "cudaGraphLaunch", 100, 5, 1)]
    problem = trace_problem(after_the_steps(graph), Stamped(30), 5, 3, device)
    assert problem and "launches 1 kernel(s) or graph(s)" in problem and "cudaGraphLaunch" in problem


def before_the_steps(rows: list[tuple]) -> TraceAnalysis:
    """trace_of's three steps (from 0 ms), after host events that start before the first step's range opens, as
    (kind, name, microseconds before 0 ms, length in microseconds, thread)."""
    return TraceAnalysis(finish(pd.concat([
        trace_of([5, 6, 7]).events[["kind", "name", "start_ns", "end_ns", "pid", "tid"]],
        pd.DataFrame([{"kind": kind, "name": name, "start_ns": -ahead * 1000, "end_ns": (length - ahead) * 1000,
                       "pid": 1, "tid": tid} for kind, name, ahead, length, tid in rows])], ignore_index=True)),
        fmt="fabricated", source="test")


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_before_the_first_step_only_the_harness_opens_the_window(device):
    """Red team 24 trained the window's batches in a batch-source callback of its own, which the harness called
    as the window opened, before the first step's range. There the harness re-draws the head from the window key
    (as an H200's traces show: randn, mul, zeros, copies) and copies weights; anything else fails the trace."""
    opening = [("cpu_op", "aten::randn", 900, 20, 1), ("cpu_op", "aten::normal_", 895, 10, 1),
               ("cpu_op", "aten::mul", 870, 5, 1), ("cpu_op", "aten::zeros", 860, 5, 1),
               ("cpu_op", "aten::zero_", 858, 2, 1), ("cpu_op", "aten::to", 850, 30, 1),
               ("cpu_op", "aten::copy_", 840, 20, 1), ("cuda_api", "cudaLaunchKernel", 835, 2, 1),
               ("cpu_op", "aten::pin_memory", 800, 30, 2), ("python", "workload.py(107): set_key", 700, 5, 1),
               ("cpu_op", "aten::empty", 760, 1, 2), ("cpu_op", "aten::set_", 758, 1, 2),  # a batch from a worker
               ("cpu_op", "aten::randperm", 690, 3, 1)]  # chapter 09's ranks draw their sample order
    assert trace_problem(before_the_steps(opening), Stamped(30), 5, 3, device) is None
    trained = opening + [("cpu_op", "aten::addmm", 600, 50, 1), ("cpu_op", "aten::item", 500, 5, 1),
                         ("cpu_op", "Optimizer.step#SGD.step", 400, 50, 1)]
    problem = trace_problem(before_the_steps(trained), Stamped(30), 5, 3, device)
    assert problem and "runs 3 operator(s) before its first step's range opened" in problem and "addmm" in problem
    graph = opening + [("cuda_api", "cudaGraphLaunch", 300, 5, 1)]
    problem = trace_problem(before_the_steps(graph), Stamped(30), 5, 3, device)
    assert problem and "launches 1 kernel(s) or graph(s) before its first step's range opened" in problem


def test_in_a_chapter_about_loading_data_waiting_for_a_batch_is_not_hidden_work():
    """A step that waits 90% of its time for its batch and trains in the rest: data_wait's lesson, so the
    evidence must be data_wait's, not a trace refused for work it does not show."""
    trace = trace_of([5, 6, 7], covered=0.08)
    rows = trace.events.copy()
    waits = [{"kind": "range", "name": "data", "start_ns": index * 10_000_000 + 900_000, "end_ns": (index + 1) * 10_000_000,
              "pid": 1, "tid": 1} for index in range(3)]
    waited = TraceAnalysis(finish(pd.concat([rows[["kind", "name", "start_ns", "end_ns", "pid", "tid"]],
                                             pd.DataFrame(waits)], ignore_index=True)), fmt="fabricated", source="test")
    assert trace_problem(waited, Stamped(30), 5, 3, "cpu", excuse_data_wait=True) is None
    assert "only 8% of each step's time" in trace_problem(waited, Stamped(30), 5, 3, "cpu")


def test_covered_share_counts_overlaps_once_and_only_inside_the_step():
    from checker.grader.collect import covered_share

    starts, ends = np.array([0, 5, 30, 90, 200]), np.array([10, 20, 40, 150, 300])
    assert covered_share(starts, ends, 0, 100) == pytest.approx((20 + 10 + 10) / 100)
    assert covered_share(np.array([], dtype=np.int64), np.array([], dtype=np.int64), 0, 100) == 0.0


# -- tampering -----------------------------------------------------------------------------------------------
def test_only_a_change_of_content_in_the_graders_files_withholds_a_verdict(tmp_path):
    """An instructor's `git clone` of the checkout in another terminal hard-links .git's packs, and a hard link,
    `touch` or a chmod changes a file's ctime but nothing it holds: none voids a grade. A file whose content
    changed (even with its old size and mtime put back), a new file, or a file with nothing to compare it with
    (no digest taken at the start, none recorded by pip) does."""
    import base64
    import hashlib
    import time

    home = tmp_path / "home"  # a folder on sys.path that holds the checkout and its .git
    checkout, site = home / "checker", tmp_path / "site-packages"
    (checkout / "checks").mkdir(parents=True)
    (checkout / "checks" / "syncs.py").write_text("THRESHOLD = 0\n")
    (home / ".git" / "objects" / "pack").mkdir(parents=True)
    pack = home / ".git" / "objects" / "pack" / "pack-1.idx"
    pack.write_bytes(b"idx")
    (checkout / ".git").mkdir()  # a folder named .git inside a watched one is not watched either
    (checkout / ".git" / "index").write_bytes(b"index")
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "ops.py").write_text("def add(a, b):\n    return a + b\n")
    (site / "torch" / "_compiled.pyc").write_bytes(b"pyc")
    digest = base64.urlsafe_b64encode(hashlib.sha256((site / "torch" / "ops.py").read_bytes()).digest()).rstrip(b"=")
    (site / "torch-9.dist-info").mkdir()
    (site / "torch-9.dist-info" / "RECORD").write_text(f"torch/ops.py,sha256={digest.decode()},30\n"
                                                        "torch/_compiled.pyc,,\n")
    elsewhere = tmp_path / "clone"
    elsewhere.mkdir()
    watch = sandbox.TrustedFiles([checkout, site, home], checkout=[checkout])
    time.sleep(0.05)
    os.link(pack, elsewhere / "pack-1.idx")                      # git clone: hard links to the packs
    os.link(checkout / "checks" / "syncs.py", elsewhere / "syncs.py")
    os.link(site / "torch" / "ops.py", elsewhere / "ops.py")      # uv: hard links to installed files
    for path in (checkout / "checks" / "syncs.py", site / "torch" / "ops.py", checkout / ".git" / "index"):
        os.utime(path)                                            # touch
    os.chmod(site / "torch" / "ops.py", 0o600)
    assert watch.changed() == []

    syncs = checkout / "checks" / "syncs.py"
    before = syncs.stat()
    syncs.write_text("THRESHOLD = 9\n")                          # the same size, its mtime put back
    os.utime(syncs, ns=(before.st_atime_ns, before.st_mtime_ns))
    (site / "torch" / "ops.py").write_text("def add(a, b):\n    return a + a\n")
    (checkout / "sitecustomize.py").write_text("import os\n")
    os.utime(site / "torch" / "_compiled.pyc")                   # pip recorded no digest of it: no telling
    assert sorted(watch.changed(limit=10)) == sorted(str(p) for p in (
        syncs, site / "torch" / "ops.py", checkout / "sitecustomize.py", checkout, site / "torch" / "_compiled.pyc"))


# -- the source scan ---------------------------------------------------------------------------------------
def test_the_labs_and_solutions_pass_the_scan(pristine_lab):
    from checker.base.chapters import all_chapters

    for chapter in all_chapters():  # the labs as shipped: what a learner writes in theirs is theirs to have scanned
        lab = pristine_lab(chapter.id) / chapter.lab_file
        assert findings(lab.read_text(), host_reads=True) == [], chapter.lab_script
    for path in [*ROOT.glob("solutions/**/*.py"), *ROOT.glob("chapters/*/slow.py")]:
        # a chapter's tools beside its script (chapter 08's diagnose.py runs the jobs it profiles) are not graded runs
        graded = path.name in ("train.py", "slow.py")
        assert findings(path.read_text(), host_reads=graded) == [], path


@pytest.mark.parametrize("line", [
    "torch.autograd.profiler._is_profiler_enabled", "sys._getframe(1)", "exec(code)", "import inspect",
    "from checker.candidate import session", "open('/proc/self/maps').read()", "os.environ.get('NSYS_CONFIG')",
    "clean = session._window_s is None", "if getattr(session, 'x') or session._tail_open: pass",
    "read.__code__ = read.__code__.replace(co_name='_get_value')", "types.CodeType(*args)",
    "lib = torch.library.Library('at' + 'en', 'IMPL')", "stamps = getattr(session, '_window_stamps_ns')",
    "stamps = session.__dict__['_window_' + 'stamps_ns']", "for name in vars(session): pass",
    "value = getattr(session, name)", "getattr(sys, 'settrace')(None)",
    "make = torch.from_numpy.__wrapped__", "make = torch.as_tensor.__closure__[0].cell_contents",
    "switch = string.Formatter().get_field('0._enable_record_function', [torch.autograd], {})[0]",
])
def test_probes_are_found_with_their_line(line):
    assert findings(f"session = start('01_item_syncs')\n{line}\n")[0].startswith("line 2:")


@pytest.mark.parametrize("line", [
    "with torch.autograd.graph.saved_tensors_hooks(torch.autograd.backward, keep): pass",
    "torch._C._autograd._push_saved_tensors_default_hooks(pack, unpack)",
    "out.grad_fn._raw_saved_self.register_hooks(pack, unpack)",
    "hooks = torch.autograd.graph.save_on_cpu()", "hooks.pack_hook = functools.partial(chain, x)",
])
def test_code_run_inside_an_operators_dispatch_is_refused(line):
    """Autograd's saved-tensor hooks run inside the op that saves a tensor: a backward run there hides under it."""
    assert "saved-tensor hooks" in findings(f"session = start('05_pointwise_chains')\n{line}\n")[0]


@pytest.mark.parametrize("source", [
    "try:\n    x.gather(0, i)\nexcept IndexError as err:\n    n = int(str(err).split()[1])\n",
    "try:\n    x.gather(0, i)\nexcept Exception:\n    n = sys.exc_info()[1].args\n",
    "import traceback\n",
    "try:\n    x.gather(0, i)\nexcept IndexError:\n    pass\nn = later.__context__\n",
])
def test_in_a_chapter_counting_host_reads_a_caught_errors_text_is_refused(source):
    """An out-of-bounds index's error names the index: a value read from it is a read no trace records (red team
    19). A chapter that counts no reads has no such read to hide."""
    assert any("caught error" in found for found in findings(source, host_reads=True))
    assert not any("caught error" in found for found in findings(source))
    assert findings("try:\n    x = 1\nexcept KeyboardInterrupt as err:\n    raise\n", host_reads=True) == []


@pytest.mark.parametrize("handler", ["except IndexError:", "except:", "except (KeyError, RuntimeError):",
                                     "except torch.AcceleratorError:", "except Exception:"])
def test_in_a_chapter_counting_host_reads_catching_an_operators_error_is_refused(handler):
    """Whether an out-of-range index raised is one bit of a value (red team 16's bounds_probe_06): on a CPU the
    failing op is an ordinary op in the trace, so the scan is the defence there."""
    source = f"try:\n    x.index_select(0, i)\n{handler}\n    bit = 1\n"
    assert any("catches the error an operator raises" in found for found in findings(source, host_reads=True))
    assert findings(source) == []


def test_in_a_chapter_counting_host_reads_suppressing_an_operators_error_is_refused():
    """contextlib.suppress catches as an except clause does (red team 51's stdlib_raise_01); suppressing another
    kind of error is not refused."""
    source = "from contextlib import suppress\nwith suppress(IndexError):\n    x.index_select(0, i)\n"
    assert any("suppress(IndexError)" in found for found in findings(source, host_reads=True))
    assert findings(source.replace("IndexError", "FileNotFoundError"), host_reads=True) == []


@pytest.mark.parametrize("line", ["helper = ProcessPoolExecutor(1)", "p = multiprocessing.Process(target=read)",
                                  "mine, theirs = mp.Pipe()", "ctx = mp.get_context('spawn')",
                                  "box = shared_memory.SharedMemory(create=True, size=8)"])
def test_in_a_chapter_counting_host_reads_a_process_of_its_own_is_refused(line):
    """A process of the script's reads what the training process writes into memory they share and hands plain
    numbers back, where no trace follows (red team 51's relay_pool_01, relay_pipe_01); a DataLoader's workers are
    torch's, started by no name of the script's."""
    assert any("starts a process of its own" in found for found in findings(line, host_reads=True))
    assert findings(line) == []


@pytest.mark.parametrize("line", ["v = torch.ctypes.c_float.from_address(address).value",
                                  "(address,) = map(torch.Tensor.data_ptr, (t,))", "c = getattr(torch, 'ctypes')",
                                  "raw = string_at(p, 4)"])
def test_in_a_chapter_counting_host_reads_raw_memory_is_refused(line):
    """A tensor's address dereferenced through ctypes (reached as torch.ctypes, past the refused import) reads its
    values with no op or call a CPU trace names (red team 24)."""
    assert any("raw memory" in found for found in findings(line + "\n", host_reads=True))
    assert findings(line + "\n") == []


@pytest.mark.skipif(not Path("/usr/bin/gcc").exists(), reason="needs gcc to build a C extension")
def test_native_code_of_the_scripts_own_is_reported(tmp_path):
    """Red team 25 read values with a C extension the script compiled: no op, call or audit event shows its reads. The
    harness names every shared object mapped from outside Python's installation and the system's libraries."""
    import sysconfig

    source = tmp_path / "own.c"
    source.write_text('#include <Python.h>\nstatic struct PyModuleDef d = {PyModuleDef_HEAD_INIT, "own", NULL, -1, NULL};\n'
                      "PyMODINIT_FUNC PyInit_own(void) { return PyModule_Create(&d); }\n")
    built = tmp_path / "own.so"
    subprocess.run(["/usr/bin/gcc", "-shared", "-fPIC", "-I", sysconfig.get_paths()["include"], str(source), "-o",
                    str(built)], check=True)
    probe = ("import sys; sys.path.insert(0, sys.argv[1])\n"
             "import checker.candidate.session as harness\n"
             "before = harness.native_code_of_its_own()\n"
             "import own\n"
             "print(before, harness.native_code_of_its_own())\n")
    out = subprocess.run([sys.executable, "-c", probe, str(tmp_path)], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"[] {[str(built.resolve())]}"


def test_raw_memory_read_in_the_window_counts_as_a_read(monkeypatch):
    """With the scan off, ctypes announces each object made over raw memory to the interpreter's audit hooks: one
    made inside the window, in a chapter counting host reads on a CPU, is counted with the numpy views."""
    import ctypes

    import checker.candidate.session as harness

    value = ctypes.c_float(2.5)
    monkeypatch.setattr(harness, "_RAW_READS", [0])
    monkeypatch.setattr(harness, "_CURRENT", _host_reads_session(_window_open=False))
    assert ctypes.c_float.from_address(ctypes.addressof(value)).value == 2.5
    assert harness._RAW_READS[0] == 0  # outside the window: set-up's business
    monkeypatch.setattr(harness, "_CURRENT", _host_reads_session(_window_open=True))
    ctypes.c_float.from_address(ctypes.addressof(value))
    ctypes.string_at(ctypes.addressof(value), 4)
    ctypes.c_float.from_buffer(bytearray(4))
    assert harness._RAW_READS[0] >= 3  # from_buffer announces two events


@pytest.mark.parametrize("line", ["w = torch._C.PyTorchFileWriter(buffer)", "raw = torch._C._pickle_save(t)",
                                  "w.write_record('d', storage, storage.nbytes())", "gen.set_state(state)",
                                  "value = gen.initial_seed()"])
def test_in_a_chapter_counting_host_reads_torchs_c_serializers_are_refused(line):
    """A tensor's bytes written into a buffer through torch's C serializers, or set as a generator's state and read
    back as its seed, are a read of its values that no op records (red teams 20 and 21)."""
    assert any("no op records" in found for found in findings(line + "\n", host_reads=True))
    assert findings(line + "\n") == []


@pytest.mark.parametrize("line", ["as_ints = torch.ops.aten._tensor_to_list",
                                  "f = torch.ops.aten.__getattr__('aten::_tensor_to_list')",
                                  "f = torch._C._get_operation_overload('aten::x', '')",
                                  "f = torch._C._jit_get_operation('aten::x')"])
def test_in_a_chapter_counting_host_reads_torchscripts_tolist_operator_is_refused(line):
    """TorchScript's tolist is an aten operator of the JIT's registry (aten::_tensor_to_list): it reads every value of
    a tensor in C++ with no op of its own a trace records (red team 60's opslist_*), and the registry's lookups reach
    it by a name in a string."""
    assert any("TorchScript's registry" in found for found in findings(line + "\n", host_reads=True)), line


@pytest.mark.parametrize("line", ["import numpy as np", "from numpy import exp", "a = t.detach().numpy()",
                                  "t = torch.from_numpy(a)"])
def test_in_a_chapter_counting_a_steps_ops_numpy_is_refused(line):
    """Passes done in numpy run no op a count can see (red team 20's numpy_chain_05: 25 passes a step against 81)."""
    assert any("outside PyTorch" in found for found in findings(line + "\n", counts_ops=True))
    assert not any("outside PyTorch" in found for found in findings(line + "\n"))


def test_every_name_the_harness_keeps_about_its_window_and_tail_is_refused():
    """A name added to the session's window or tail state is one more tell, unless the scan knows it."""
    import re

    from checker.base.scan import PROBE_ATTRIBUTES

    source = (ROOT / "checker" / "candidate" / "session.py").read_text()
    names = set(re.findall(r"self\.(_(?:window|tail)\w*)", source))
    names |= set(re.findall(r"def (_\w*(?:window|tail)\w*)\(", source))
    assert {"_window_end", "_tail_open", "_close_window"} <= names  # the pattern still finds them
    assert names <= set(PROBE_ATTRIBUTES), names - set(PROBE_ATTRIBUTES)


def test_words_in_docstrings_are_not_probes():
    assert findings('"""Profile it with nsys: LD_PRELOAD is not needed."""\nx = 1\n') == []


# -- the command line --------------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_relative_submission_folder_works_from_any_folder(tmp_path):
    student = tmp_path / "class" / "alice"
    student.mkdir(parents=True)
    student.joinpath("train.py").write_text((ROOT / "solutions" / "01_item_syncs" / "train.py").read_text())
    proc = subprocess.run([sys.executable, "-m", "checker", "check", "01", "--submission", "class/alice",
                           "--device", "cpu", "--only", "host_syncs"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600, env=dict(os.environ, WORKBOOK_ROOT=str(ROOT)))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED" in proc.stdout


def test_a_run_folder_leaves_room_for_worker_sockets_under_a_deep_tmpdir(tmp_path, monkeypatch):
    """A grading worker's temporary folder is deep; DataLoader workers put AF_UNIX sockets (107 bytes at most)
    in the run's TMPDIR: the check folder moves to /tmp rather than fail every chapter 03 solution."""
    import tempfile

    deep = tmp_path / ("d" * 60) / "tmp"
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    folder = sandbox.check_folder()
    try:
        socket = f"{folder}/run-XXXXXXXX/tmp/pymp-XXXXXXXX/listener-XXXXXXXX"
        assert len(socket) <= sandbox.SOCKET_PATH_MAX, socket
    finally:
        folder.rmdir()


@pytest.mark.slow
def test_the_grader_reads_the_trace_the_harness_sent_not_the_file_left_behind(tmp_path):
    """A torch.profiler trace reaches the grader over its channel the moment the harness writes it, and the run's own
    file is deleted then: nothing is left to rewrite afterwards (tests/redteam/cheats/rewrite_trace_01 looks for it)
    or to read (on a GPU the trace is chapter 00's truth per step), and the checks read what was sent."""
    import gzip
    import json

    from checker.base.chapters import get_chapter
    from checker.grader.runs import run_script
    from checker.grader.sandbox import check_folder

    chapter = get_chapter("01")
    cheat = Path(__file__).parent / "redteam" / "cheats" / "rewrite_trace_01" / "train.py"
    workdir = check_folder()
    run = run_script(chapter, cheat, "cpu", steps=int(chapter.config("cpu")["warmup"]) + 4, trace="torch",
                     workdir=workdir, seed=3, window_key=5)
    assert not list(run.copy.parent.glob("*.json*"))  # nothing left behind in the run's folder
    assert not str(run.trace_file).startswith(str(run.copy.parent))
    read = json.loads(gzip.open(run.trace_file, "rt").read())
    assert "aten::_local_scalar_dense" in {str(e.get("name")) for e in read["traceEvents"]}


def test_a_run_compiles_into_its_own_folder_unless_a_kept_cache_is_given(tmp_path):
    """torch.compile's caches point into the run's own HOME: a run forked from the fork server as another user
    must not reach for the server's HOME (the ladder's first compiled rung failed so on an H100)."""
    from checker.grader import compile_cache, sandbox

    folder = sandbox.RunFolder.create(tmp_path, Path(__file__), sandbox.run_identity())
    env = sandbox.environment(folder)
    for name in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"):
        assert Path(env[name]).is_relative_to(Path(env["HOME"])), name
    kept = tmp_path / "kept"
    env.update(compile_cache.environment(kept))
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(kept)


@pytest.mark.slow
def test_a_timed_run_with_a_traced_tail_is_timed_then_traced_in_one_process(tmp_path):
    """--trace-tail: the window is timed untraced and the weights sent; then the steps after it are traced, stamped
    on the grader's clock and sent as the trace, which the grader believes only for those steps."""
    from checker.trace import load

    chapter = get_chapter("01")
    warmup, steps, tail = int(chapter.config("cpu")["warmup"]), int(chapter.config("cpu")["warmup"]) + 3, 4
    result = run_script(chapter, chapter.slow_script, "cpu", steps=steps, trace="torch", trace_tail=tail,
                        seed=3, window_key=5)
    assert result.weights and len(result.step_ms) == 3 and result.samples_per_s  # the window: 3 steps, untraced
    assert result.trace_first_step == steps and len(result.trace_stamps_ns) == tail + 1
    trace = load(result.trace_file)
    assert sorted(int(s) for s in trace.get_steps()["step"]) == list(range(steps, steps + tail))
    assert trace_problem(trace, result, steps, tail, "cpu") is None
    assert "added, removed or renamed" in trace_problem(trace, result, warmup, tail, "cpu")


@pytest.mark.slow
def test_under_a_traced_tail_nothing_the_script_reads_tells_a_timed_step_from_a_traced_one(tmp_path):
    """A script that knew where the window ends could keep a pattern in the timed steps and drop it in the traced
    ones. It is told one number of steps (argv, total_steps, cfg), the tail's included, and what the window measured
    appears only after the last step: on every step it reads the same."""
    body = HEAD + textwrap.dedent("""
        import sys
        seen = []
        for step, batch in session.steps(session.batches):
            seen.append((session.total_steps, session.cfg["steps"], session.window_s, session.samples,
                         len(session.step_starts_ns), session.steps_done - step))
        told = int(sys.argv[sys.argv.index("--steps") + 1])
        if len(set(seen)) != 1 or told != len(seen) or seen[0][0] != len(seen):
            raise SystemExit(f"told --steps {told}, ran {len(seen)} steps, read {sorted(set(seen), key=str)}")
        session.finish()
    """)
    result = run(script(tmp_path, body), steps=7, trace="torch", trace_tail=3)
    assert len(result.step_ms) == 2 and result.trace_first_step == 7  # the window: steps 5 and 6; traced: 7 to 9
    assert result.weights and result.samples_per_s


@pytest.mark.slow
def test_under_the_grader_the_script_never_reads_what_the_harness_measured(tmp_path):
    """Chapter 00 grades a script's own step-time report against the grader's clock: a script that could read the
    harness's stamps (session.step_starts_ns, window_s, what finish() returns) could hand them back as its own
    (a red-team cheat did, 2026-11-26). Run on its own, a script still reads them."""
    body = HEAD + textwrap.dedent("""
        for step, batch in session.steps(session.batches):
            pass
        measured = session.finish()
        if session.step_starts_ns or session.window_s is not None or session.samples or measured["step_ms"] \\
                or measured["samples_per_s"] or measured["window_s"] is not None:
            raise SystemExit("the harness's measurements reached the script")
    """)
    result = run(script(tmp_path, body))
    assert result.samples_per_s and len(result.step_ms) == 2  # the grader measured it all the same


@pytest.mark.slow
def test_under_the_grader_the_harness_holds_no_clock_reading(tmp_path):
    """Not by any name: a script that reads the session's private state (getattr with a string, vars()) finds no
    time the harness took during the run (a red-team cheat reported getattr(session, "_window_stamps_ns")), and no
    trace file the run's own profiler wrote."""
    body = HEAD + textwrap.dedent("""
        import time
        begun = time.perf_counter_ns()
        for step, batch in session.steps(session.batches):
            pass
        session.finish()
        ended = time.perf_counter_ns()

        def numbers(value, depth=0):
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                yield value
            elif depth < 3 and isinstance(value, (list, tuple, set)):
                for item in value:
                    yield from numbers(item, depth + 1)
            elif depth < 3 and isinstance(value, dict):
                for item in value.values():
                    yield from numbers(item, depth + 1)

        held = {name: value for name, value in vars(session).items()
                if any(begun <= n <= ended for n in numbers(value))}
        stamps = vars(session).get("_window_stamps_ns")
        import pathlib
        traces = sorted(pathlib.Path(__file__).parent.rglob("*.json*"))  # the run's folder: where its trace is written
        if held or stamps or session.trace_file is not None or traces:
            raise SystemExit(f"the harness kept what it measured: {sorted(held)}, {stamps!r}, {session.trace_file}, "
                             f"{traces}")
    """)
    result = run(script(tmp_path, body), trace="torch")
    assert result.samples_per_s and len(result.step_ms) == 2 and result.trace_file.is_file()


@pytest.mark.slow
def test_traced_steps_after_the_window_that_the_grader_did_not_ask_for_end_the_run(tmp_path):
    body = HEAD + textwrap.dedent("""
        from checker.candidate import session as harness
        for step, batch in session.steps(session.batches):
            pass
        harness.LAUNCH.channel.send({"type": "tail"})
        session.finish()
    """)
    with pytest.raises(ScriptError, match="traced steps after the window out of turn"):
        run(script(tmp_path, body))


def test_a_grader_importing_from_where_runs_write_refuses_to_grade(monkeypatch):
    """A driver script in /tmp (or PYTHONPATH naming it) puts the runs' scratch folder on the import path: runs
    could plant modules for the next run, and the grader's own files there would read as tampering."""
    import tempfile

    from checker.base.chapters import get_chapter
    from checker.base.errors import WorkbookError
    from checker.grader.evaluate import evaluate

    monkeypatch.syspath_prepend(tempfile.gettempdir())
    with pytest.raises(WorkbookError, match="PYTHONPATH") as refused:
        evaluate(get_chapter("00"), variant="solution", device="cpu")
    assert "Python imports from" in str(refused.value)


@pytest.mark.slow
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="a known limit: under a traced tail the traced steps are the last trace_steps of "
                   "the steps a script is handed, and the speed judges the window (docs/trust.md); strict, so a "
                   "change that closes it turns this red")
def test_a_script_cannot_keep_its_syncs_where_a_traced_tail_does_not_look(monkeypatch):
    """tests/redteam/gpu/tail_aware_06 keeps chapter 06's syncs in every step but the last trace_steps. Chapter 06
    traces its tail on a GPU; here on a CPU, its throughput given a low bar so that a timed pair carries the trace.
    (Without a traced tail, as chapter 06 runs on a CPU, the traced run's window is all clean steps: the work done.)"""
    from checker.grader.evaluate import evaluate

    chapter = get_chapter("06")
    monkeypatch.setitem(chapter.workload["cpu"], "traced_tail", True)
    throughput = chapter.check("throughput")
    monkeypatch.setitem(throughput.threshold, "cpu", 0.5)
    monkeypatch.delitem(throughput.skip, "cpu")
    report = evaluate(chapter, variant="lab", submission=ROOT / "tests" / "redteam" / "gpu" / "tail_aware_06", device="cpu")
    assert any(what.endswith("then traced") for what in (t["what"] for t in report.timings)), "no traced tail was made"
    assert {c.name: c.status for c in report.checks}["host_syncs"] == "failed"


# -- the window's data -------------------------------------------------------------------------------------
def test_chapter_06s_window_batches_do_not_exist_before_the_window():
    """Chapter 06's targets depend on the batch alone: from a fixed pool that the key only reordered, a script could
    compute every batch's targets in set-up and look them up in the step (red-team cheat cached_targets_06). The
    window's batches are drawn from the key as each step fetches one: none equals a batch drawn before, and the
    same seed and key draw the same batches (the slow script and the learner's train on the same data)."""
    import torch

    from checker.base.chapters import get_chapter
    from checker.base.workloads import harness_fetch, load_workload_module

    chapter = get_chapter("06_hidden_syncs")
    cfg = dict(chapter.config("cpu"), seed=3)

    def draws(key):
        workload = load_workload_module(chapter.dir).build(cfg, torch.device("cpu"))
        before = [batch for _ in range(3) for batch in workload.batches]  # every batch set-up could see, and more
        workload.on_window(key)
        window, batches = [], iter(workload.batches)
        for _ in range(len(workload.batches)):
            with harness_fetch():  # once keyed, a batch is drawn only while session.steps() fetches, one per fetch
                window.append(next(batches))
        return before, window

    before, window = draws(key=5)
    assert not hasattr(load_workload_module(chapter.dir).build(cfg, torch.device("cpu")).batches, "batches")
    seen = {tuple(t.flatten().tolist()) for batch in before for t in batch[1:2]}
    assert window and not any(tuple(batch[1].flatten().tolist()) in seen for batch in window)
    _, again = draws(key=5)
    _, other = draws(key=6)
    assert all(torch.equal(a, b) for x, y in zip(window, again) for a, b in zip(x, y))
    assert not all(torch.equal(x[0], y[0]) for x, y in zip(window, other))


def test_work_done_by_another_process_under_the_run_is_out_of_the_traces_sight():
    """A trace records the training process only: where other processes under a traced run used more than a sliver
    of CPU in its window (a helper that reads values for it), the trace is not the record of the window's work,
    except in a chapter whose lesson is loader workers, whose own checks judge them."""
    from types import SimpleNamespace

    from checker.grader.collect import elsewhere, OTHER_PROCESS_FLOOR_NS

    helper = SimpleNamespace(window_cpu_ns=(248_000_000, 6_700_000))
    assert "other processes under the run ran 6.7 ms" in elsewhere(helper, loader_workers=False)
    assert elsewhere(helper, loader_workers=True) is None
    assert elsewhere(SimpleNamespace(window_cpu_ns=(900_000_000, 0)), loader_workers=False) is None
    assert elsewhere(SimpleNamespace(window_cpu_ns=(10_000_000, OTHER_PROCESS_FLOOR_NS)), loader_workers=False) is None
    assert elsewhere(SimpleNamespace(window_cpu_ns=None), loader_workers=False) is None  # nsys: the tool's process


def test_the_grader_reads_the_cpu_time_of_every_process_under_a_run():
    import os
    import subprocess
    import sys

    from checker.grader.sandbox import cpu_of_run

    child = subprocess.Popen([sys.executable, "-c", "import time\nt = time.process_time()\n"
                              "while time.process_time() - t < 0.2: pass\nprint('done', flush=True)\n"
                              "import sys; sys.stdin.read()"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"done"
        own, others = cpu_of_run(os.getpid())
        assert others >= 150_000_000 and own > 0  # the child's 0.2 s of CPU, counted as another process's
    finally:
        child.kill()
        child.wait()


def test_every_traced_cpu_step_stores_gradients_into_every_trainable_tensor_of_the_model():
    """A step run in another process, a decoy backward left in the traced one (its node count is its own median),
    stores gradients into none of the model's tensors: on a CPU trace each window step must store one into every
    trainable tensor the referee's model has."""
    from types import SimpleNamespace

    import pandas as pd

    from checker.checks.same_work import steps_trained

    def evidence(leaves):
        work = pd.DataFrame({"step": [5, 6, 7], "work": [40, 40, 40], "step_ns": [1, 1, 1], "leaves": leaves})
        trace = SimpleNamespace(get_step_work=lambda: work, has_cuda=False)
        pair = (SimpleNamespace(), SimpleNamespace(trace_first_step=5, steps=8))
        return SimpleNamespace(traces={"candidate": trace}, candidate_run=pair[1], traced=pair, pairs=[pair],
                               verdicts={0: {"candidate": {"parameters": 24}, "baseline": {"parameters": 24}}})

    assert steps_trained(evidence([24, 24, 48]))["line"] is None  # two backward passes in a step: 48
    decoy = steps_trained(evidence([1, 1, 1]))
    assert "fewer than the model's 24 trainable tensors" in decoy["line"] and decoy["measured"]["parameters"] == 24


def test_each_step_is_held_to_its_own_share_of_the_work_where_the_slow_scripts_trace_holds_it():
    """Chapter 00's steps differ by design (a long batch every fourth step: a short step runs about a quarter of a long
    one's GPU time, in the slow script as in the solution); an H200 check of the solution failed on it when every
    step was held to the busiest steps' work. Held to the slow script's same step, the same profile passes, and a
    step that skipped its training fails whatever its share."""
    from types import SimpleNamespace

    import pandas as pd

    from checker.checks.same_work import steps_trained

    def trace(work):
        frame = pd.DataFrame({"step": list(range(10, 10 + len(work))), "work": work, "step_ns": 1,
                              "leaves": 0})
        return SimpleNamespace(get_step_work=lambda: frame, has_cuda=True)

    design = [100, 26, 26, 26] * 3  # a long step, then three short ones
    def judged(candidate, baseline=design):
        run = SimpleNamespace(trace_first_step=10, steps=10 + len(candidate))
        traces = {"candidate": trace(candidate)}
        if baseline is not None:
            traces["baseline"] = trace(baseline)
        return steps_trained(SimpleNamespace(traces=traces, candidate_run=run, traced=None, pairs=[], verdicts={}))

    honest = judged([v * 0.4 for v in design])  # faster, with the slow script's profile
    assert honest["line"] is None and honest["measured"]["against"] == "slow script's same step"
    assert "busy steps' work" in judged(design, baseline=None)["line"]  # without the slow script's trace: the old rule
    skipped = [v * 0.4 for v in design]
    skipped[5] = 1  # a short step that did not train
    failed = judged(skipped)
    assert "1 of 12 window steps" in failed["line"] and "step 15 " in failed["line"]


def test_operators_run_with_op_recording_switched_off_make_a_cpu_trace_unbelieved(tmp_path):
    """An operator called from Python always runs an aten op the profiler records inside its call; calls that hold
    none ran with recording switched off (here through a computed name, past the source scan, and called from C, so
    that the trace names no call of the switch). math's own `log` is no operator of torch's. A switch called from
    Python is named in the trace, and that alone makes it unbelieved."""
    import math

    import torch
    from torch.profiler import profile, record_function

    from checker.grader.collect import unrecorded_operators
    from checker.trace import load

    import ctypes
    import os

    # the switch in torch's C++ library: the harness's watcher of the Python one switches nothing (it only counts)
    library = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    try:
        switch = library["_ZN2at20enableRecordFunctionEb"]
    except AttributeError:
        pytest.skip("this torch's libtorch_cpu.so exports no at::enableRecordFunction(bool) to switch with")
    switch.argtypes, switch.restype = [ctypes.c_bool], None
    x = torch.randn(64, 64)

    def traced(hide: bool):
        with profile(with_stack=True) as prof:
            with record_function("step 0"):
                if hide:
                    list(map(switch, [False]))  # called from C: no frame names it
                for _ in range(4):
                    torch.sigmoid(x).mul(x).add(x)
                    math.log(2.0)
                if hide:
                    list(map(switch, [True]))
        path = tmp_path / f"trace-{hide}.json"
        prof.export_chrome_trace(str(path))
        return load(path).events

    assert unrecorded_operators(traced(hide=False)) is None
    assert "recorded no op" in unrecorded_operators(traced(hide=True))
    # named: torch's own switch called from Python, in a process without the harness (whose watcher switches nothing)
    named = tmp_path / "trace-named.json"
    subprocess.run([sys.executable, "-c", f"""
import torch
from torch.profiler import profile, record_function
x = torch.randn(64, 64)
with profile(with_stack=True) as prof:
    with record_function("step 0"):
        torch.autograd._enable_record_function(False)
        for _ in range(4):
            torch.sigmoid(x).mul(x).add(x)
        torch.autograd._enable_record_function(True)
prof.export_chrome_trace({str(named)!r})
"""], check=True, capture_output=True, timeout=120)
    assert "switches what the profiler records 2 time(s)" in unrecorded_operators(load(named).events)


@pytest.mark.slow
def test_grading_workers_run_their_submissions_as_users_of_their_own(tmp_path, monkeypatch):
    """Several workers grading at once: each runs its students' code as a user id of its own, which no user of the
    system holds, so that one student's run cannot signal another's (kill -1 as a shared user would end every
    run of every worker), trace it, or use up the process cap they would share."""
    from checker.grading.classroom import plan_slots

    if not sandbox.running_as_root():
        pytest.skip("the grader drops runs to another user only when it runs as root")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    slots = plan_slots(CHAPTER, "cuda", None, None, ["H100", "H100"])
    mine, other = (int(slot.env[sandbox.RUN_UID_ENV]) for slot in slots)
    assert mine != other and mine != sandbox.run_identity()[0]
    import pwd
    for uid in (mine, other):
        with pytest.raises(KeyError):
            pwd.getpwuid(uid)
    # a process of the other worker's user, and a run of this worker's that tries to signal it
    neighbour = subprocess.Popen(["sleep", "60"], preexec_fn=sandbox.preexec((other, sandbox.run_identity()[1]), sandbox.Limits(), False))
    try:
        monkeypatch.setenv(sandbox.RUN_UID_ENV, str(mine))
        monkeypatch.setattr(sandbox, "_IDENTITY", None)
        assert sandbox.run_identity()[0] == mine
        body = f"""
            import os
            try:
                os.kill({neighbour.pid}, 0)
                said = "reached"
            except PermissionError:
                said = "refused"
            raise SystemExit(f"uid {{os.getuid()}}: the neighbour's process {{said}}")
        """
        with pytest.raises(ScriptError, match=f"uid {mine}: the neighbour's process refused"):
            run(script(tmp_path, body))
    finally:
        neighbour.kill()
        neighbour.wait()


def test_torch_compiles_worker_pool_is_not_counted_among_data_workers(tmp_path):
    """torch.compile starts a pool of compile workers on its first compile (a helper process running
    torch/_inductor/compile_worker/__main__.py, its workers below it) and keeps it to the end: on a GPU machine with
    many cores, a compiled solution's pool was counted as data workers started after the first step."""
    pool = tmp_path / "torch" / "_inductor" / "compile_worker" / "__main__.py"
    pool.parent.mkdir(parents=True)
    pool.write_text("import subprocess, sys, time\n"
                    "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
                    "time.sleep(30)\n")
    before = sandbox.descendants(os.getpid())
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    helper = subprocess.Popen([sys.executable, str(pool), "--workers=1"])
    try:
        deadline = time.monotonic() + 10
        while len(sandbox.descendants(os.getpid()) - before) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(sandbox.descendants(os.getpid()) - before) == 3  # the worker, the helper and its pool
        assert sandbox.worker_processes(sandbox.descendants(os.getpid())) - before == {worker.pid}
    finally:
        for process in (worker, helper):
            process.kill()
            process.wait()
        for pid in sandbox.descendants(os.getpid()) - before:  # the pool's worker, orphaned
            os.kill(pid, 9)


@pytest.mark.slow
def test_bytes_after_a_line_that_carries_none_end_the_run(tmp_path):
    """A line announcing bytes after it would swallow the harness's next lines (its step stamps) as its payload; only
    the messages that carry bytes may announce them."""
    body = HEAD + textwrap.dedent("""
        import json, os
        evt = os.open("evt", os.O_WRONLY)
        os.write(evt, json.dumps({"type": "report", "name": "x", "value": 1, "nbytes": 26}).encode() + b"\\n")
    """) + LOOP
    with pytest.raises(ScriptError, match="only probed, samples, trace, weights carry bytes"):
        run(script(tmp_path, body))


def test_a_thread_that_ended_keeps_its_cpu_time_in_the_run():
    """Work done in a thread that started and ended between two reads still counts as the process's: a thread's
    schedstat goes with it, its time stays in the process's utime and stime (red team 13's samples prepared in a
    short-lived thread)."""
    import os
    import threading
    import time

    from checker.grader.sandbox import _cpu_ns

    def burn():
        until = time.thread_time() + 0.3
        while time.thread_time() < until:
            pass

    before = _cpu_ns(os.getpid())[0]
    worker = threading.Thread(target=burn)
    worker.start()
    worker.join()
    assert _cpu_ns(os.getpid())[0] - before >= 0.25e9


def test_the_harness_counts_every_call_of_the_recording_switches():
    """Imported before the script runs, the harness wraps PyTorch's switches of what the profiler records wherever
    a script can reach them by name, so a call from a thread the Python tracer does not follow is counted too."""
    import threading

    import torch
    import torch.autograd.profiler

    from checker.candidate import session

    before = len(session._SWITCH_CALLS)
    for module in (torch._C._autograd, torch.autograd):
        assert getattr(module, "_enable_record_function")._workbook_watched
    assert torch.autograd.profiler._toggle_collection_dynamic._workbook_watched
    worker = threading.Thread(target=lambda: getattr(torch.autograd, "_enable_record" + "_function")(True))
    worker.start()
    worker.join()
    assert session._SWITCH_CALLS[before:] == ["_enable_record_function"]


def test_tensors_made_over_python_buffers_in_the_window_count_once_written(monkeypatch):
    """The harness's watch on as_tensor/from_numpy/frombuffer/asarray: in a CPU window of a chapter that counts host
    reads, a tensor made over a numpy array or a bytearray without a copy is kept, and counts once written in place;
    one made from a list, converted (a copy), or made outside the window is not kept."""

    from checker.candidate import session as harness

    monkeypatch.setattr(harness, "_MADE_OVER_BUFFERS", [])
    monkeypatch.setattr(harness, "_CURRENT", _host_reads_session(_window_open=True, _made_beyond=0))
    out = np.empty(3, dtype=np.float32)
    torch.as_tensor(out).copy_(torch.ones(3))  # written and dropped in one line
    torch.from_numpy(np.zeros(2))  # made, never written
    torch.frombuffer(bytearray(16), dtype=torch.float32).add_(1)
    torch.as_tensor([1.0, 2.0]).add_(1)  # a list: a fresh tensor
    torch.as_tensor(np.zeros(3), dtype=torch.float32).add_(1)  # converted: a copy
    assert len(harness._MADE_OVER_BUFFERS) == 3 and harness.written_made_over_buffers() == 2
    harness._CURRENT._window_open = False
    torch.as_tensor(np.empty(2, dtype=np.float32)).add_(1)  # outside the window
    assert harness.written_made_over_buffers() == 2


def test_a_numpy_view_made_before_the_window_counts_once_its_tensor_is_written_in_the_window(monkeypatch):
    """The harness's watch on Tensor.numpy (red team 15): a view made before the window, its tensor written in place
    in the window, counts even when the view is hidden or dropped before the window closes; a view of a tensor the
    window never writes does not."""
    import weakref

    from checker.candidate import session as harness

    monkeypatch.setattr(harness, "_NUMPY_OF", weakref.WeakSet())
    monkeypatch.setattr(harness, "_NUMPY_HELD", {})
    state = _host_reads_session(_window_open=False, _made_beyond=0)
    monkeypatch.setattr(harness, "_CURRENT", state)
    written, untouched = torch.zeros(3), torch.zeros(3)
    hidden = np.empty(2, dtype=object)
    hidden[0], hidden[1] = written.numpy(), np.asarray(untouched)  # made before the window, hidden in an object array
    state._window_open = True
    harness.hold_numpy_views()
    written.copy_(torch.ones(3))
    del hidden
    assert harness.written_numpy_views() == 1


def test_a_tensor_made_over_a_buffer_before_the_window_counts_once_written_in_the_window(monkeypatch):
    """Red team 26 made a tensor over a numpy array in set-up, copied each step's loss into it, read it through numpy
    and dropped both in the last step. Every tensor made over a Python buffer (or a DLPack capsule that is not a
    tensor's) before the window is held from its open, like a tensor with a numpy view; one the window never writes
    does not count, nor does a tensor made from a copy."""
    import weakref

    from checker.candidate import session as harness

    monkeypatch.setattr(harness, "_NUMPY_OF", weakref.WeakSet())
    monkeypatch.setattr(harness, "_NUMPY_HELD", {})
    state = _host_reads_session(_window_open=False, _made_beyond=0)
    monkeypatch.setattr(harness, "_CURRENT", state)
    box, idle = np.zeros(2), np.zeros(2)
    mail = getattr(torch, "from_numpy")(box)  # the watched maker, by whatever road
    kept = torch.from_numpy(idle)
    over_capsule = torch.from_dlpack(np.zeros(3))
    copied = torch.as_tensor(np.zeros(3), dtype=torch.float32)  # a copy: its own memory
    state._window_open = True
    harness.hold_numpy_views()
    mail[0].copy_(torch.tensor(1.5))
    over_capsule.add_(1)
    copied.add_(1)
    assert float(box[0]) == 1.5
    del mail, box
    assert kept.sum() == 0 and harness.written_numpy_views() == 2


def test_a_dlpack_export_made_before_the_window_counts_once_its_tensor_is_written():
    """np.from_dlpack(t) reads a tensor's memory from numpy as .numpy() does: the export is watched the same way."""
    probe = ("import numpy as np, torch, weakref\n"
             "import checker.candidate.session as harness\n"
             "t = torch.zeros(2); view = np.from_dlpack(t)\n"
             "print(any(x is t for x in harness._NUMPY_OF))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "True"


@pytest.mark.skipif(not Path("/usr/bin/gcc").exists(), reason="needs gcc to build a library")
@pytest.mark.parametrize("name", ["reader.bin", "libreader.so"])
def test_native_code_is_found_by_what_is_executable_and_what_ctypes_opened(tmp_path, name):
    """Red team 26: a library whose file name has no ".so" (reader.bin), and one closed again before the window
    closed (_ctypes.dlclose): each is found, by the memory map's executable mappings and by ctypes' audited dlopen."""
    source = tmp_path / "reader.c"
    source.write_text("float rdf(const float *p) { return *p; }\n")
    built = tmp_path / name
    subprocess.run(["/usr/bin/gcc", "-shared", "-fPIC", str(source), "-o", str(built)], check=True)
    probe = ("import sys, ctypes, _ctypes\n"
             "import checker.candidate.session as harness\n"
             "before = harness.native_code_of_its_own()\n"
             "lib = ctypes.CDLL(sys.argv[1])\n"
             "mapped = harness.native_code_of_its_own()\n"
             "handle = lib._handle; del lib; _ctypes.dlclose(handle)\n"
             "print(before, mapped, harness.native_code_of_its_own())\n")
    out = subprocess.run([sys.executable, "-c", probe, str(built)], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    shown = str([str(built.resolve())])
    assert out.stdout.strip() == f"[] {shown} {shown}"


@pytest.mark.parametrize("line", ["c = getattr(torch, 'ctyp' + 'es')", "m = sys.modules['ctyp' + 'es']",
                                  "f = vars(torch)[name]", "f = torch.__dict__['x']", "g = operator.attrgetter(n)",
                                  "f = reduce(getattr, names, torch)", "f = type(t).__getattribute__(t, n)",
                                  "setattr(torch, name, f)", "from operator import attrgetter"])
def test_names_computed_at_run_time_are_refused_in_every_chapter(line):
    """Red team 26 reached ctypes and dlclose by names built from pieces ("ctyp" + "es"), past every rule that reads
    a name: an attribute picked by a computed name, sys.modules and an object's namespace read as a dict are refused."""
    assert any("computed" in found or "by name" in found for found in findings(line + "\n"))


@pytest.mark.parametrize("line", ["n = sum(1 for _ in model.modules())", "f = getattr(torch.nn, 'ReLU')",
                                  "has = hasattr(model, 'head')", "w = getattr(model, 'weight', None)"])
def test_names_written_out_are_not_refused(line):
    assert findings(line + "\n", host_reads=True) == []


def test_starting_a_program_is_refused_where_host_reads_count():
    """A compiler started from the script builds the native code that reads values where no trace looks (red teams 25
    and 26); chapter 04's fusion by hand, which counts no host reads, may still build its C loops."""
    source = "import subprocess\nsubprocess.run(['gcc', 'r.c'])\nos.system('cc r.c')\n"
    assert len(findings(source, host_reads=True)) == 3
    assert findings(source) == []


def test_an_export_made_in_the_window_on_another_thread_is_a_read(monkeypatch):
    """A thread started in the window is not followed by the profiler's Python tracer, and a DLPack export runs no op:
    an export (.numpy(), DLPack) made there, on another thread than the window's, counts as a read; one made on the
    window's thread is the trace's to count, and one made before the window is only held."""
    import threading
    import weakref

    from checker.candidate import session as harness

    monkeypatch.setattr(harness, "_NUMPY_OF", weakref.WeakSet())
    monkeypatch.setattr(harness, "_NUMPY_HELD", {})
    monkeypatch.setattr(harness, "_RAW_READS", [0])
    state = _host_reads_session(_window_open=False, _window_thread=threading.get_ident())
    monkeypatch.setattr(harness, "_CURRENT", state)
    loss = torch.tensor([2.5])
    np.from_dlpack(loss)  # before the window
    state._window_open = True
    np.from_dlpack(loss)
    loss.numpy()  # on the window's thread
    assert harness._RAW_READS[0] == 0
    for read in (lambda: np.from_dlpack(loss), lambda: loss.numpy(), lambda: torch.utils.dlpack.to_dlpack(loss)):
        reader = threading.Thread(target=read)
        reader.start()
        reader.join()
    assert harness._RAW_READS[0] == 3  # each export once, though __dlpack__ calls _to_dlpack


def test_the_process_memory_opened_as_a_file_is_noted(tmp_path):
    """Red team 27 read each step's loss with os.pread from /proc/<pid>/mem, the mailbox found through
    /proc/<pid>/maps: every open of a process's memory file in the run is noted, by any name (a link to it, a name
    relative to a folder's descriptor), and so is every open of a process's accounting (/proc/<pid>/stat, status,
    ...: its fault counts carried a value's bits, procstat_01); no other file is."""
    link = tmp_path / "data.bin"
    link.symlink_to("/proc/self/mem")
    (tmp_path / "mem.txt").write_text("x")
    probe = ("import os, sys\n"
             "import checker.candidate.session as harness\n"
             "for path in sys.argv[1:]:\n"
             "    os.close(os.open(path, os.O_RDONLY))\n"
             "print(harness._MEMORY_FILES)\n")
    paths = [str(tmp_path / "mem.txt"), "/proc/self/cmdline", f"/proc/{os.getpid()}/status", "/proc/self/mem",
             str(link), "/proc/thread-self/schedstat"]
    out = subprocess.run([sys.executable, "-c", probe, *paths], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == str([f"/proc/{os.getpid()}/status", "/proc/self/mem", str(link),
                                      "/proc/thread-self/schedstat"])
    from checker.candidate.session import _opens_process_memory

    assert _opens_process_memory("mem") and not _opens_process_memory("/srv/data/mem")


def test_a_path_under_proc_is_refused_in_every_chapter():
    assert findings('where = "/proc/" + str(os.getpid())\n')
    assert findings("open('/proc/1/mem')\n")


def test_on_a_cpu_a_range_outside_the_steps_is_foreign_work():
    """A compiled region (torch.compile's CPU kernels, run from a thread of the script's) records almost no operator
    outside the steps, only its range (red team 26's untried idea): on a CPU trace the harness opens no range there,
    so one is foreign work, before the first step as after the last."""
    compiled = [("range", "Torch-Compiled Region: 0/0", 40, 30, 2), ("cpu_op", "aten::empty_strided", 41, 1, 2)]
    problem = trace_problem(after_the_steps(compiled), Stamped(30), 5, 3, "cpu")
    assert problem and "Torch-Compiled Region" in problem
    problem = trace_problem(before_the_steps([(kind, name, 500, 30, tid) for kind, name, _, _, tid in compiled]),
                            Stamped(30), 5, 3, "cpu")
    assert problem and "before its first step's range opened" in problem


@pytest.mark.parametrize("line", ["from pandas.core.algorithms import np", "y = torch.from_dlpack(a)",
                                  "a = np.from_dlpack(t)", "c = torch.utils.dlpack.to_dlpack(t)"])
def test_numpy_by_another_name_is_refused_where_a_steps_ops_are_counted(line):
    """Red team 28 ran chapter 05's chain in numpy reached through pandas' own import of it, tensors crossing by
    DLPack: in the chapters that count a step's ops, numpy by that name and DLPack are refused too."""
    assert any("outside PyTorch" in found for found in findings(line + "\n", counts_ops=True))
    assert findings(line + "\n") == []


def test_storages_over_a_file_or_in_shared_memory_count(monkeypatch, tmp_path):
    """Red team 34 copied each step's values into a storage mapped over a file (a storage's own copy_ moves no
    version counter) and read them back with os.pread. Every storage the script maps over a file or moves to shared
    memory is counted when made (from_file by any of its roads, share_memory_, a new shared storage), and a storage
    over a file still alive after the window is found by the walk (a bare storage written or not, a tensor once
    written); a plain tensor is neither, nor is a file mapped privately."""
    from checker.candidate import session as harness

    monkeypatch.setattr(harness, "_FILE_MEMORY", [])
    before = harness.tensor_views()
    box = torch.UntypedStorage.from_file(str(tmp_path / "box"), True, 12)
    typed = torch.FloatStorage.from_file(str(tmp_path / "typed"), True, 3)
    mapped = torch.from_file(str(tmp_path / "mapped"), True, 3)
    torch.zeros(3).share_memory_()
    torch.UntypedStorage._new_shared(8)
    torch.zeros(3).clone().add_(1)
    torch.from_file(str(tmp_path / "mapped"), False, 3)  # mapped privately: writes never reach the file
    assert len(harness._FILE_MEMORY) == 5
    box.copy_(torch.ones(3).untyped_storage())
    assert harness.tensor_views() - before == 2, (box, typed, mapped)  # the bare storages; the tensor is unwritten
    mapped.add_(1)
    assert harness.tensor_views() - before == 3


def test_the_scan_refuses_a_class_base_where_reads_count():
    """torch.Tensor.__base__ is TensorBase, whose numpy makes a view of a tensor the harness does not hold (an
    immutable C type: its method cannot be watched); red team 63's mailbox_base_01 read every step's loss through
    one. A class's bases and method resolution order are refused where reads count, as TensorBase itself is."""
    from checker.base.scan import findings

    for source in ("import torch\nview = torch.Tensor.__base__.numpy(torch.zeros(2))\n",
                   "import torch\nbase = torch.Tensor.__mro__[1]\n", "import torch\nbase = torch.Tensor.mro()[1]\n",
                   "import inspect, torch\nbase = inspect.getmro(torch.Tensor)[1]\n",
                   "import torch\nbase = torch.Tensor.__bases__[0]\n",
                   "every = object.__subclasses__()\n"):
        assert any("past the ones the harness watches" in line for line in findings(source, host_reads=True)), source
    assert findings("import torch\nbase = torch.Tensor.__base__\n", host_reads=False) == []


def test_the_scan_reads_a_dotted_name_by_its_last_part():
    """A refused name reached through a dotted string and a resolver (pydoc.locate("torch.UntypedStorage.from_file"),
    red team 34) is refused as the name itself, and the resolvers are refused in every chapter."""
    from checker.base.scan import findings

    source = 'import pydoc\nmake = pydoc.locate("torch.UntypedStorage.from_file")\n'
    found = findings(source, host_reads=True)
    assert any("(from_file)" in line for line in found), found
    assert any("pydoc.locate" in line for line in found), found
    resolved = findings('import pkgutil\nf = pkgutil.resolve_name("torch:from_file")\n', host_reads=False)
    assert any("pkgutil.resolve_name" in line for line in resolved), resolved
    assert findings('path = "model.pt"\nname = "torch.float32"\n', host_reads=True) == []


def test_the_stepping_threads_blocked_time_is_read_from_the_kernel():
    """The harness's count of the stepping thread's blocked time (Session._add_blocked): a sleep is blocked time, a
    busy loop is not (the kernel's scheduler statistics: on a CPU or waiting for one is not blocked)."""
    from types import SimpleNamespace

    from checker.candidate.session import Session

    if Session._sched_mark() is None:
        pytest.skip("this kernel gives no /proc/thread-self/schedstat")
    probe = SimpleNamespace(_blocked=[0, 0], _blocked_mark=Session._sched_mark(), _sched_mark=Session._sched_mark)
    time.sleep(0.2)
    Session._add_blocked(probe)
    assert probe._blocked[0] >= 150_000_000 and probe._blocked[1] >= probe._blocked[0], probe._blocked
    slept = probe._blocked[0]
    end = time.monotonic() + 0.2
    while time.monotonic() < end:
        pass
    Session._add_blocked(probe)
    assert probe._blocked[0] - slept < 100_000_000 and probe._blocked[1] >= 350_000_000, probe._blocked


def test_a_profiler_switch_watched_by_the_harness_hands_out_no_original():
    """The harness counts every call of PyTorch's op-recording switches and switches nothing: its watcher keeps no
    original (red team 52's fmt_partial_04 called `_enable_record_function.__wrapped__`, past the count)."""
    import torch.autograd

    from checker.candidate import session as harness

    switch = torch.autograd._enable_record_function
    assert harness.PROFILER_SWITCHES and getattr(switch, "_workbook_watched", False) and not hasattr(switch, "__wrapped__")
    assert not any(callable(cell.cell_contents) for cell in switch.__closure__ or ())
    with torch.profiler.profile() as prof:
        switch(False)
        torch.ones(3).add(1)
        switch(True)
    assert any(event.name == "aten::add" for event in prof.events())  # recording stayed on


def test_under_the_grader_start_takes_the_graders_settings_whatever_the_script_passes(monkeypatch, capsys):
    """Red team 67's rawflip_07 gave start() ``--set finished_batches=1``: the harness compared one window batch
    with its samples instead of every one, and the steps finished the rest. Under the grader the settings are the
    grader's command line alone (LaunchOptions.args); the script's are ignored, and it is told so."""
    from checker.candidate import session as harness

    monkeypatch.setattr(harness, "LAUNCH", harness.LaunchOptions(args=["--device", "cpu", "--steps", "15"]))
    monkeypatch.setattr(harness, "_CURRENT", None)
    monkeypatch.setattr(harness, "Session", lambda chapter, device, cfg: cfg)  # the settings start() built
    cfg = harness.start("07_capstone_ladder", argv=["--device", "cpu", "--set", "finished_batches=1", "--warmup", "1"])
    assert cfg["finished_batches"] == get_chapter("07").config("cpu")["finished_batches"] and cfg["warmup"] == 8
    assert "start() keeps the grader's settings" in capsys.readouterr().err
    monkeypatch.setattr(sys, "argv", ["train.py", "--set", "finished_batches=1"])  # sys.argv rewritten: the same
    assert harness.start("07_capstone_ladder")["finished_batches"] > 1
    monkeypatch.setattr(harness, "LAUNCH", None)  # a script on its own: its --set is the learner's to give
    assert harness.start("07_capstone_ladder", argv=["--device", "cpu", "--set", "finished_batches=1"])["finished_batches"] == 1


def test_fewer_window_batches_compared_than_the_graders_settings_ask_fail():
    """samples_in_workers holds the count the harness compared to the grader's settings (every window batch, up to
    finished_batches), not to the run's own."""
    from types import SimpleNamespace

    from checker.checks.samples_in_workers import _unfinished_batches

    def line(checked, unfinished=0, steps=15):
        run = SimpleNamespace(finished_batches=(checked, unfinished), steps=steps)
        return _unfinished_batches(SimpleNamespace(cfg={"finished_batches": 64, "warmup": 8}, pairs=((None, run),)), {})

    assert line(7) is None  # the 7 window steps of a 15-step run with 8 warm-up steps
    assert "not the 7 the grader's settings ask for" in line(1)
    assert "6 of the 7 window batches compared (in 1 run)" in line(7, 6)


def test_a_source_encoding_other_than_utf8_is_what_python_runs_and_is_refused():
    """Red team 67's utf7rd_01: under a UTF-7 coding cookie a comment to a UTF-8 reader holds statements. The scan
    reads a loaded file as Python decodes it, and a declared encoding other than UTF-8 is named."""
    from checker.base.scan import declared_encoding, python_source

    hidden = b"# -*- coding: utf-7 -*-\nx = 1  # a note +AAo-x = 2\n"
    assert declared_encoding(hidden) == "utf-7" and "\nx = 2" in python_source(hidden)
    namespace: dict = {}
    exec(compile(hidden, "<utf7>", "exec"), namespace)  # what Python runs: the bytes, the cookie honoured
    assert namespace["x"] == 2
    assert declared_encoding(b"# -*- coding: utf-8 -*-\nx = 1\n") is None and declared_encoding(b"x = 1\n") is None
    assert declared_encoding(b"\xef\xbb\xbfx = 1\n") is None  # a byte-order mark is UTF-8's
    assert declared_encoding(b"# coding: latin-1\nx = 1\n") == "iso-8859-1"
    assert declared_encoding(b"# coding: no-such-codec\nx = 1\n")


def test_a_numpy_view_the_script_keeps_into_the_window_is_counted_however_its_memory_is_written():
    """Red team 67's dataview_01 wrote each step's loss through ``tensor.data`` (a version counter of its own, so
    the held tensor's version never moved) and read it through a numpy view made in set-up, dropped in the last
    step. A numpy array made of a tensor outside the workload's build and alive at the window's open is a view."""
    from checker.candidate import session as harness

    box = torch.zeros(2)
    view = box.numpy()[0:1]  # a view of the exported array keeps it alive
    harness.hold_numpy_views()
    assert harness._HELD_VIEWS[0] >= 1
    del view
    harness.hold_numpy_views()
    held = harness._HELD_VIEWS[0]
    harness._BUILDING[0] = True  # the workload's own arrays are not the script's
    try:
        kept = box.numpy()
        harness.hold_numpy_views()
        assert harness._HELD_VIEWS[0] == held
    finally:
        harness._BUILDING[0] = False
        harness._HELD_VIEWS[0] = 0
        harness.written_numpy_views()  # (clears what hold_numpy_views held)
    assert kept is not None


def test_a_dlpack_export_the_script_makes_counts_as_a_view_held_into_the_window():
    """dataview_01's road through np.from_dlpack (session 80's dlpackdata_01): what a capsule becomes cannot be
    followed, so every DLPack export the script makes outside the workload's build counts."""
    from checker.candidate import session as harness

    before = harness._DLPACK_EXPORTS[0]
    try:
        harness._BUILDING[0] = True
        np.from_dlpack(torch.zeros(2))
        assert harness._DLPACK_EXPORTS[0] == before  # the workload's own
        harness._BUILDING[0] = False
        np.from_dlpack(torch.zeros(2))
        assert harness._DLPACK_EXPORTS[0] == before + 1
    finally:
        harness._BUILDING[0] = False
        harness._DLPACK_EXPORTS[0] = before


def test_the_scripts_signal_handlers_and_finalizers_wait_from_the_close_to_the_hand_back():
    """Red team 69's sigdefer_09 evaluated in a timer's handler while the harness exported its trace, before the CPU
    reading after the window began: under the grader the handler only runs once the script has its code back."""
    import gc
    import signal

    from checker.candidate.session import script_held

    ran: list[int] = []
    previous = signal.signal(signal.SIGUSR1, lambda signum, frame: ran.append(signum))
    try:
        with script_held(True):
            signal.raise_signal(signal.SIGUSR1)
            signal.raise_signal(signal.SIGUSR1)
            assert ran == [] and not gc.isenabled()
        assert ran == [signal.SIGUSR1] and gc.isenabled()  # raised again once, with the script's own handler back
        with script_held(False):  # a script run on its own: nothing held
            signal.raise_signal(signal.SIGUSR1)
            assert len(ran) == 2
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_work_after_the_window_is_held_to_the_baselines():
    """same_work's CPU after the window (red team 68's deferred_eval_09: 0.3 s where honest ends take hundredths)."""
    from types import SimpleNamespace

    from checker.checks.same_work import work_after_window

    def run(seconds):
        return SimpleNamespace(after_cpu_ns=None if seconds is None else (int(seconds * 1e9), 0), ranks=[])

    def job(*seconds):  # a job of ranks: the busiest counts
        return SimpleNamespace(after_cpu_ns=None, ranks=[run(s) for s in seconds])

    assert work_after_window([(run(0.004), run(0.02))], None, "cpu", "baseline")["line"] is None
    moved = work_after_window([(job(0.0, 0.004), job(0.30, 0.002))], None, "cpu", "baseline")
    assert moved["seconds"]["candidate"] == 0.3 and "work moved after the timed window" in moved["line"]
    unread = work_after_window([(run(0.004), run(None))], None, "cpu", "baseline")
    assert unread["seconds"] is None and "could not be measured" in unread["line"]
    assert work_after_window([(run(0.004), run(0.3))], None, "cuda", "baseline") is None  # not read on a GPU


def test_chapter_09s_scan_refuses_another_road_between_the_ranks():
    """Red team 68's rpc_rounds_09 averaged gradients through torch.distributed.rpc, which allreduce_rounds does not
    read; red team 69 linked the ranks with multiprocessing.connection. Refused where the ranks' exchanges count."""
    from checker.base.scan import findings, scan_flags

    assert scan_flags(["same_work", "allreduce_rounds"])["counts_rounds"]
    for source in ("import torch.distributed.rpc as rpc\n", "from multiprocessing.connection import Listener\n",
                   "import socket\n", "import torch.distributed as dist\nstore = dist.TCPStore('h', 1)\n"):
        assert findings(source, counts_rounds=True), source
        assert not findings(source), source  # elsewhere a lab may name them


def test_the_loaders_workers_are_stopped_when_the_steps_are_over():
    """session.steps() stops the worker processes of the DataLoader it drew from once its steps are over: their
    prefetch and their exit are no step's work, and were read as work after the window (a solution with six workers
    failed same_work on a 2-core machine: evidence/history/2026-12-07-cpu-session81-after-window-workers.txt). A
    persistent loader iterated again starts new workers."""
    import torch
    from torch.utils.data import DataLoader

    from checker.candidate.session import _stop_workers

    loader = DataLoader(torch.arange(64.0), batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=4)
    batches = iter(loader)
    assert next(batches).tolist() == [0.0, 1.0, 2.0, 3.0]
    workers = list(batches._workers)
    _stop_workers(loader, batches)
    assert workers and not any(w.is_alive() for w in workers)
    assert loader._iterator is None
    again = iter(loader)
    assert next(again).tolist() == [0.0, 1.0, 2.0, 3.0] and all(w.is_alive() for w in again._workers)
    _stop_workers(loader, again)
    plain = iter(DataLoader(torch.arange(8.0), batch_size=4))  # no workers: nothing to stop
    _stop_workers(None, plain)
    assert next(plain).tolist() == [0.0, 1.0, 2.0, 3.0]


def test_a_loaders_workers_behind_a_generator_are_stopped_too():
    """A prefetcher or a generator of the script's between the loader and session.steps() (a learner's own GPU
    prefetcher) hides the DataLoader's iterator from steps(): its workers are found among the live objects."""
    import torch
    from torch.utils.data import DataLoader

    from checker.candidate.session import _stop_workers

    loader = DataLoader(torch.arange(64.0), batch_size=4, num_workers=2, persistent_workers=True, prefetch_factor=4)

    def moved(source):
        for batch in source:
            yield batch * 1

    batches = moved(loader)
    assert next(batches).tolist() == [0.0, 1.0, 2.0, 3.0]
    inner = loader._iterator
    workers = list(inner._workers)
    _stop_workers(batches, batches)
    assert workers and not any(w.is_alive() for w in workers)
    assert loader._iterator is None
    again = iter(loader)
    assert next(again).tolist() == [0.0, 1.0, 2.0, 3.0]
    _stop_workers(loader, again)
    assert not any(w.is_alive() for w in again._workers)
