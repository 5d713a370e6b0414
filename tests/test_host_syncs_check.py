"""The host_syncs check on real traces: counts per step, logging steps left out, and where each sync came from."""

from pathlib import Path

import pytest

from checker.base.chapters import CheckSpec
from checker.checks.evidence import Evidence
from checker.checks.host_syncs import host_syncs
from checker.trace import load

TRACES = Path(__file__).parent / "data" / "traces"
SPEC = CheckSpec(name="host_syncs", doc="no syncs", threshold={"cuda": 0, "cpu": 0}, skip={}, options={})


def evaluation(trace_path, device="cuda", log_every=0):
    """The evidence of a traced run whose trace is ``trace_path``, as the grader hands it to the checks."""
    return Evidence(chapter=None, device=device, trace_tool="torch", candidate=Path("scripts/trace_fixture_programs.py"),
                    cfg={"log_every": log_every}, traced=(None, None), traces={"candidate": load(trace_path)})


@pytest.mark.parametrize("tool_file", ["kineto.json.gz", "nsys.sqlite.gz"])
def test_gpu_trace_three_syncs_per_step(tool_file):
    outcome = host_syncs(evaluation(TRACES / "pageable_item" / tool_file), SPEC)
    assert outcome.status == "failed"
    assert outcome.measured["host_syncs_per_step"] == 3 and outcome.measured["steps"] == 7


def test_gpu_kineto_from_torch_2_11_says_it_has_no_call_lines():
    outcome = host_syncs(evaluation(TRACES / "pageable_item" / "kineto.json.gz"), SPEC)
    assert all("records no call lines" in line for line in outcome.evidence), outcome.evidence


def test_logging_steps_are_left_out():
    outcome = host_syncs(evaluation(TRACES / "pageable_item" / "kineto.json.gz", log_every=2), SPEC)
    assert outcome.measured["logging_steps_excluded"] == [1, 3, 5]
    assert outcome.measured["steps"] == 4 and outcome.measured["host_syncs"] == 12


def test_clean_gpu_trace_passes():
    outcome = host_syncs(evaluation(TRACES / "pinned_clean" / "kineto.json.gz"), SPEC)
    assert outcome.status == "passed" and outcome.measured["host_syncs"] == 0 and not outcome.evidence


def test_cpu_trace_names_the_line_and_its_code():
    outcome = host_syncs(evaluation(TRACES / "cpu" / "pageable_item.json.gz", device="cpu"), SPEC)
    assert outcome.status == "failed"
    assert any("`state[\"loss_sum\"] += loss.item()" in line for line in outcome.evidence), outcome.evidence


def test_a_read_made_while_the_harness_fetched_the_batch_is_not_blamed_on_the_loops_line():
    """Chapter 07's lab on a CPU: '0.2 per step ... train.py:40 `for step, ... in session.steps(loader)`', a line a
    learner cannot act on. A read inside the harness's `data` range says it was the DataLoader fetching the batch."""
    import pandas as pd

    from checker.trace import TraceAnalysis
    from checker.trace.events import finish

    def host(kind, name, start, end, **extra):
        return {"kind": kind, "name": name, "start_ns": start, "end_ns": end, "pid": 1, "tid": 1, **extra}

    rows = []
    for step in range(5):
        t = 1000 * step
        rows += [host("range", f"step {step}", t, t + 900),
                 host("python", "train.py(40): <module>", t, t + 900, call_from="train.py:40"),
                 host("python", "<built-in method item of Tensor object at 0x1>", t + 300, t + 360,
                      call_from="train.py:45"),
                 host("cpu_op", "aten::_local_scalar_dense", t + 310, t + 320)]
    rows += [host("range", "data", 10, 200), host("cpu_op", "aten::_local_scalar_dense", 30, 40)]
    trace = TraceAnalysis(finish(pd.DataFrame(rows)), "kineto", source="hand-made")
    evidence = Evidence(chapter=None, device="cpu", trace_tool="torch", candidate=Path("train.py"),
                        cfg={"log_every": 0}, traced=(None, None), traces={"candidate": trace})
    outcome = host_syncs(evidence, SPEC)
    assert outcome.measured["host_syncs_per_step"] == 1.2
    assert outcome.evidence == [
        "1 per step: aten::_local_scalar_dense from train.py:45",
        "0.2 per step: aten::_local_scalar_dense while session.steps() fetched the next batch, made by the DataLoader, "
        "its sampler or dataset (a DataLoader whose workers do not outlive an epoch starts anew each epoch), iterated "
        "at train.py:40"], outcome.evidence


def test_numpy_views_of_tensors_are_found_wherever_the_process_holds_them():
    """A numpy array over a tensor's memory (Tensor.numpy(), np.asarray(t), a slice or a memoryview of one) lets a
    CPU run read values no trace records: the harness counts them in globals, containers and a running function's
    locals; an array a tensor was made over (torch.from_numpy: data coming in) is not one."""
    import numpy as np
    import torch

    from checker.candidate.session import tensor_views

    before = tensor_views()
    kept = {"slice": torch.zeros(4).numpy()[1:], "asarray": np.asarray(torch.ones(3))}
    local_view = torch.zeros(2).numpy()
    raw = memoryview(torch.zeros(2).numpy())
    assert tensor_views() - before == 4
    del kept, local_view, raw
    incoming = torch.from_numpy(np.zeros(3))
    assert tensor_views() == before and incoming.sum() == 0


def test_memory_a_written_tensor_shares_with_a_python_object_or_a_file_is_found(tmp_path):
    """The other direction (red team 12): a tensor made over a numpy array, a bytearray or a file, a value copied
    into it and read back from the array, the bytes or the file. A tensor over data coming in is written by no op,
    so its version counter says which is which."""
    import numpy as np
    import torch

    from checker.candidate.session import tensor_views

    before = tensor_views()
    host = np.zeros(2)
    box = torch.as_tensor(host)
    raw = bytearray(16)
    mirror = torch.frombuffer(raw, dtype=torch.float64)
    (tmp_path / "box.bin").write_bytes(bytes(16))
    mapped = torch.from_file(str(tmp_path / "box.bin"), shared=True, size=2, dtype=torch.float64)
    assert tensor_views() == before  # nothing written yet: data coming in
    box[0].copy_(torch.tensor(3.0))
    mirror.add_(1)
    mapped[1].copy_(torch.tensor(2.0))
    assert tensor_views() - before == 3
    del host, box, raw, mirror, mapped
    assert tensor_views() == before


def test_a_sparse_size_inferred_from_its_indices_and_a_padded_length_read_values_on_a_cpu(tmp_path):
    """A sparse tensor whose size is inferred from its indices hands their largest value to Python as its shape
    (aten::sparse_coo_tensor holding aten::max), and pad_packed_sequence sizes its result by its batch sizes:
    each is a read on a CPU trace (red team 17's sparse_size_06 and packed_shape_06); a size given is none."""
    import torch
    from torch.nn.utils.rnn import PackedSequence, pad_packed_sequence

    from checker.trace import load
    from checker.trace.analyses.syncs import cpu_sync_op_rows

    values = torch.tensor([3, 1, 4])
    with torch.profiler.profile(record_shapes=True) as prof:
        torch.sparse_coo_tensor(values.reshape(1, -1), torch.ones(3), check_invariants=False).shape
        torch.sparse_coo_tensor(values.reshape(1, -1), torch.ones(3), (10,), check_invariants=False)
        pad_packed_sequence(PackedSequence(torch.zeros(5, 1), torch.tensor([3, 2])))
    path = tmp_path / "reads.json"
    prof.export_chrome_trace(str(path))
    events = load(path).events
    read = events.iloc[cpu_sync_op_rows(events)]["name"].tolist()
    assert sorted(read) == ["aten::_pad_packed_sequence", "aten::sparse_coo_tensor"], read


def test_a_sparse_tensors_count_of_stored_entries_read_is_a_read_on_a_cpu(tmp_path):
    """A product of two CSR matrices stores as many entries as its inputs' values make: a value written as a column
    index comes back as the product's `_nnz()`, with no op that reads a value (red team 29's csr_nnz_reads_06).
    Every access to a sparse tensor's members counts on a CPU trace; a dense step's ops count none."""
    import torch

    from checker.trace import load
    from checker.trace.analyses.syncs import cpu_sync_op_rows

    width = 8
    rows = torch.arange(width + 1) * torch.arange(width + 1).add(1) // 2  # row r holds r + 1 entries
    cols = torch.cat([torch.arange(r + 1) for r in range(width)])
    staircase = torch.sparse_csr_tensor(rows, cols, torch.ones(len(cols)), (width, width))
    value = torch.tensor([5])
    with torch.profiler.profile(record_shapes=True) as prof:
        dense = torch.ones(4, 4) @ torch.ones(4, 4)
        dense.sum().neg()
        one = torch.sparse_csr_tensor(torch.tensor([0, 1]), value, torch.ones(1), (1, width))
        product = one @ staircase
        read = product._nnz()
    assert read == 6  # the value, plus one: read back as a size
    path = tmp_path / "sparse.json"
    prof.export_chrome_trace(str(path))
    events = load(path).events
    names = events.iloc[cpu_sync_op_rows(events)]["name"].tolist()
    assert "aten::_nnz" in names, names
    assert not {"aten::mm", "aten::sum", "aten::neg"} & set(names), names


def test_a_nested_tensors_size_is_a_read_on_a_cpu(tmp_path):
    """A nested tensor viewed over a buffer takes its sizes from a sizes tensor, read in C++ with no op that reads a
    value, and `.size(d)` hands them to Python (red team 33's nested_reads_07). Every nested op counts on a CPU
    trace; a dense step's ops count none."""
    import torch

    from checker.trace import load
    from checker.trace.analyses.syncs import cpu_sync_op_rows

    buffer = torch.zeros(1)
    value = torch.tensor([[7]])
    with torch.profiler.profile() as prof:
        torch.ones(4, 4).matmul(torch.ones(4, 4)).sum()
        nested = torch._nested_view_from_buffer(buffer, value, torch.zeros(1, 1, dtype=torch.long),
                                                torch.zeros(1, dtype=torch.long))
        read = nested.size(1)
    assert read == 7
    path = tmp_path / "nested.json"
    prof.export_chrome_trace(str(path))
    events = load(path).events
    names = events.iloc[cpu_sync_op_rows(events)]["name"].tolist()
    assert "aten::_nested_view_from_buffer" in names, names
    assert not {"aten::mm", "aten::sum", "aten::matmul"} & set(names), names


def _tagged_as_sizing_by_values() -> set[str]:
    """Every aten op that PyTorch tags as sizing its result by its inputs' values, in the torch installed."""
    import torch

    tags = {torch.Tag.dynamic_output_shape, torch.Tag.data_dependent_output}
    found = set()
    for name in {schema.name for schema in torch._C._jit_get_all_schemas() if schema.name.startswith("aten::")}:
        packet = getattr(torch.ops.aten, name.split("::")[1], None)
        if packet is not None and any(tags & set(getattr(packet, o).tags) for o in packet.overloads()):
            found.add(name)
    return found


def test_every_op_tagged_as_sizing_by_values_is_a_read_or_reads_through_one():
    """A new op of this kind in a torch upgrade must be placed: counted itself, or shown to read through a listed op."""
    from checker.trace.analyses.syncs import CPU_SYNC_OPS, READ_BENEATH

    assert _tagged_as_sizing_by_values() - CPU_SYNC_OPS - set(READ_BENEATH) == set()


def _returning_numbers_from_tensors() -> set[str]:
    """Every aten op of the torch installed whose every overload that takes a tensor returns a Python number."""
    import collections
    import re

    import torch

    # a schema's types as torch writes them: "int", "int[]", "List[int]", "Optional[float]", "number" (a Scalar)
    number = re.compile(r"^(?:Optional\[)?(?:List\[)?(?:int|float|bool|Scalar|complex|SymInt|SymFloat|SymBool|number)"
                        r"(?:\[\])?\]?\]?\??$")
    overloads = collections.defaultdict(list)
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::") and any("Tensor" in str(a.type) for a in schema.arguments):
            overloads[schema.name].append(any(number.match(str(r.type)) for r in schema.returns))
    return {name for name, returns in overloads.items() if all(returns)}


def test_every_op_that_returns_a_number_from_a_tensor_is_a_read_or_metadata():
    """A new op that hands Python a number in a torch upgrade must be placed: a read of values, or a tensor's metadata.
    Lists of numbers too, however the schema writes them (aten::_tensor_to_list's "List[int]" was missed until red
    team 60's opslist_* read every value through it)."""
    from checker.trace.analyses.syncs import CPU_SYNC_OPS, NUMBER_OF_METADATA, NUMBER_READS, READ_BENEATH

    placed = NUMBER_READS | NUMBER_OF_METADATA | CPU_SYNC_OPS | set(READ_BENEATH)
    returning = _returning_numbers_from_tensors()
    assert {"aten::_tensor_to_list", "aten::size", "aten::dim"} <= returning  # every way a schema writes its types
    assert returning - placed == set()
    assert not NUMBER_READS & NUMBER_OF_METADATA


def test_an_op_that_returns_a_number_read_from_a_tensor_is_a_read_on_a_cpu(tmp_path):
    """fbgemm's weight quantizer returns its input's range as a Python float (red team 55's fbgemm_read_01): it counts
    once on a CPU trace. `bool(t)` reads through aten::item and counts there, once."""
    import warnings

    import torch

    from checker.trace.analyses.syncs import cpu_sync_op_rows

    value = torch.tensor([[2.5]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # fbgemm's quantizer is deprecated
        with torch.profiler.profile() as prof:
            scale = torch.fbgemm_linear_quantize_weight(value)[2]
            bool(value.sum())
            torch.ones(4, 4).matmul(torch.ones(4, 4)).sum()
    assert scale > 0
    path = tmp_path / "numbers.json"
    prof.export_chrome_trace(str(path))
    events = load(path).events
    ops = events.iloc[cpu_sync_op_rows(events)]["name"].tolist()
    assert sorted(ops) == ["aten::_local_scalar_dense", "aten::fbgemm_linear_quantize_weight"], ops


def test_the_tagged_ops_that_read_beneath_run_a_listed_read_and_ctc_loss_counts_itself(tmp_path):
    """Each op of READ_BENEATH, in its overload that sizes its result by values, runs a counted read inside it on a CPU;
    `_ctc_loss` sizes its alpha table by the largest target length with no such op (red team 35's ctc_shape_06)."""
    import torch
    import torch.nn.functional as F

    from checker.trace.analyses.syncs import cpu_sync_op_rows

    x, mask = torch.arange(6.0), torch.tensor([True, False] * 3)
    calls = {"aten::allclose": lambda: torch.allclose(x, x), "aten::argwhere": lambda: torch.argwhere(mask),
             "aten::index": lambda: x[mask], "aten::item": lambda: x[0].item(),
             "aten::masked_select": lambda: torch.masked_select(x, mask),
             "aten::one_hot": lambda: F.one_hot(torch.tensor([1, 3])),
             "aten::repeat_interleave": lambda: torch.repeat_interleave(torch.tensor([1, 2]))}
    log_probs = torch.randn(5, 1, 4).log_softmax(2)
    calls["aten::_ctc_loss"] = lambda: torch._ctc_loss(log_probs, torch.tensor([[1, 2, 3]]), torch.tensor([5]),
                                                       torch.tensor([3]))
    for name, call in calls.items():
        with torch.profiler.profile() as prof:
            call()
        path = tmp_path / f"{name.split('::')[1]}.json"
        prof.export_chrome_trace(str(path))
        events = load(path).events
        assert len(cpu_sync_op_rows(events)), name


def test_a_generators_seed_read_back_is_a_read_on_a_cpu(tmp_path):
    """A tensor's bytes set as a random generator's state come back as a Python int, its seed, with no op that reads
    them: by set_state and initial_seed (red team 21), or by the pickling protocol, __setstate__ and __reduce__
    (red team 37's genpickle_07). Every way a generator's state reaches Python counts as a read on a CPU trace;
    seeding a generator and drawing from it counts none. The scan refuses the names where reads count."""
    import torch

    from checker.base.scan import findings
    from checker.trace import load
    from checker.trace.analyses.syncs import python_reads, shown_name

    value = torch.tensor([2.5], dtype=torch.float64)
    template = torch.Generator().get_state()
    with torch.profiler.profile(with_stack=True) as prof:
        drawn = torch.Generator().manual_seed(3)
        torch.rand(2, generator=drawn)
        carrier = torch.Generator()
        carrier.__setstate__((0, None, torch.cat([value.view(torch.uint8), template[8:]])))
        pickled = carrier.__reduce__()[2][0]
        seed = carrier.initial_seed()
    assert pickled == seed == value.view(torch.int64).item()  # the value's bits, read back with no op
    path = tmp_path / "generator.json"
    prof.export_chrome_trace(str(path))
    events = load(path).events
    names = [shown_name(str(n)) for n in events.iloc[python_reads(events)]["name"]]
    assert sorted(names) == sorted(f"Generator.{m}() (a random generator's state handed to Python, which a tensor's "
                                   "bytes can have set, with no op that reads them)"
                                   for m in ("__reduce__", "initial_seed")), names
    source = "g.__setstate__((0, None, s))\nseed = g.__reduce__()[2][0]\nimport pickle\n"
    assert len(findings(source, host_reads=True)) == 3
    assert findings(source, host_reads=False) == []


def test_torchscripts_tolist_operator_called_from_python_is_a_read_on_a_cpu(tmp_path):
    """torch.ops.aten._tensor_to_list lives in TorchScript's operator registry, not the dispatcher: it reads every
    value in C++ and records only a select per element, no op that reads (red team 60's opslist_01). Called by its
    packet, the Python tracer names it, and that call counts as a read; a select made in Python counts none. (Its
    overload, `.default`, reaches the tracer with no name: the scan refuses the operator's name either way.)"""
    import torch

    from checker.base.scan import findings
    from checker.trace import load
    from checker.trace.analyses.syncs import python_reads, shown_name

    values = torch.tensor([7, 9], dtype=torch.int32)
    with torch.profiler.profile(with_stack=True) as prof:
        values.select(0, 1)
        read = torch.ops.aten._tensor_to_list(values)
    assert read == [7, 9]
    path = tmp_path / "jit_tolist.json"
    prof.export_chrome_trace(str(path))
    events = load(path).events
    names = [shown_name(str(n)) for n in events.iloc[python_reads(events)]["name"]]
    assert names == ["torch.ops.aten._tensor_to_list() (no aten op on a CPU; a device-to-host copy and a sync on a "
                     "GPU)"], names
    assert findings("import torch\nv = torch.ops.aten._tensor_to_list(t)\n", host_reads=True)


def test_a_read_the_graders_data_code_makes_in_a_fetch_counts_too(tmp_path):
    """The grader's data code reads no tensor's value in a run (its draws are Python's), so no read is excused by the
    code that made it: a script once handed the harness's KeyedOrder its own tensors to read inside the fetch, where
    the grader's reads were excused (red team 39's launder_06). A read in a frame named like the grader's data code,
    in a `data` range, counts."""
    import importlib.util

    import torch

    from checker.base.workloads import KeyedOrder
    from checker.trace import load
    from checker.trace.analyses.syncs import python_reads

    grader_like = tmp_path / "checker" / "base" / "launder.py"
    grader_like.parent.mkdir(parents=True)
    grader_like.write_text("def read(t):\n    return t.tolist()\n")
    spec = importlib.util.spec_from_file_location("launder_probe", grader_like)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    order = KeyedOrder([torch.ones(2), torch.zeros(2)])
    order.set_key(7)
    with torch.profiler.profile(with_stack=True) as prof:
        with torch.profiler.record_function("data"):
            drawn = list(order)  # the grader's own draw: Python's, no read
            module.read(torch.arange(3))
    assert len(drawn) == 2
    path = tmp_path / "launder.json"
    prof.export_chrome_trace(str(path))
    events = load(path).events
    names = events.iloc[python_reads(events)]["name"].astype(str).tolist()
    assert len(names) == 1 and "tolist" in names[0], names


def test_an_error_an_op_raised_and_caught_in_a_step_is_noted_and_a_raise_statement_is_not(monkeypatch):
    """On a CPU a bounds check that fails tells Python a bit of the index's value (red team 48's oracle_06): the
    harness's tracer notes where such an error was caught, whatever name caught it; a script's own raise is no read,
    nor an op's error in a logging step, nor the standard library's own control flow (re compiling a new pattern).
    An op's error that starts in the rest of the standard library (functools calling the op: red team 51's
    stdlib_raise_01) is noted, and one that starts in its control flow is noted where it leaves it."""
    import contextlib
    import functools
    import re
    import sys
    import threading
    from types import SimpleNamespace

    import torch

    from checker.candidate import session as harness

    monkeypatch.setattr(harness, "_OP_ERRORS", [])
    monkeypatch.setattr(harness, "_CURRENT", SimpleNamespace(_window_open=True))
    monkeypatch.setattr(harness, "_WINDOW_STEP", [3])
    monkeypatch.setattr(harness, "_WINDOW_LOG_EVERY", [10])
    probe, index = torch.zeros(4), torch.tensor([7])
    miss = IndexError

    def steps():
        try:
            probe.index_select(0, index)  # the op's error: noted
        except miss:
            pass
        with contextlib.suppress(IndexError):
            probe[index]  # a subscript's: noted
        try:
            raise ValueError("the script's own")  # a raise statement: not noted
        except ValueError:
            pass
        re.compile(r"(?P<fresh>a{2,5})[bc]+$")  # the standard library's IndexErrors: not noted
        with contextlib.suppress(IndexError):
            functools.singledispatch(torch.index_select)(probe, 0, index)  # started in functools' frame: noted
        waiting = threading.Condition()
        waiting._waiters.append(SimpleNamespace(release=functools.partial(probe.index_select, 0, index)))
        with waiting, contextlib.suppress(IndexError):
            waiting.notify()  # started in threading's own control flow, caught in this frame: noted here
        harness._WINDOW_STEP[0] = 9
        with contextlib.suppress(IndexError):
            probe.index_select(0, index)  # in a logging step: not noted

    re.purge()
    before = sys.gettrace()
    sys.settrace(harness._watch_op_errors)
    try:
        steps()
    finally:
        sys.settrace(before)
    noted = harness.op_errors()
    assert len(noted) == 4 and all("(IndexError)" in where for where in noted), noted
    assert sum(__file__ in where for where in noted) == 3 and sum("functools.py" in where for where in noted) == 1


def test_an_ops_error_the_interpreter_swallowed_in_a_finalizer_is_noted_whatever_the_hook(monkeypatch):
    """An error raised where no frame catches it (a finalizer that is functools.partial(torch.index_select, ...), run
    from C as its object is dropped) is handed to sys.unraisablehook: the bit was the hook's call (red team 59's
    delbits_06, with a list's append as the hook; delbits_stderr2_06 with the default hook writing to a sys.stderr of
    its own). The tracer sees no frame; the audit event that announces the hook's call is noted in a window step, not
    in a logging step, and not named by the object's repr (a tensor's repr reads it)."""
    import functools
    import io
    import sys
    from types import SimpleNamespace

    import torch

    from checker.candidate import session as harness

    monkeypatch.setattr(harness, "_OP_ERRORS", [])
    monkeypatch.setattr(harness, "_CURRENT", SimpleNamespace(_window_open=True, _counts_views=True))
    monkeypatch.setattr(harness, "_WINDOW_STEP", [3])
    monkeypatch.setattr(harness, "_WINDOW_LOG_EVERY", [10])
    row, slot = torch.zeros(1), torch.ones(1, dtype=torch.long)  # index 1 of a one-row tensor: out of bounds

    class Probe:
        __del__ = functools.partial(torch.index_select, row, 0, slot)

    hits = []
    monkeypatch.setattr(sys, "unraisablehook", hits.append)
    Probe()  # dropped at once: its finalizer fails, from C
    assert len(hits) == 1
    monkeypatch.setattr(sys, "unraisablehook", sys.__unraisablehook__)
    monkeypatch.setattr(sys, "stderr", io.StringIO())
    Probe()  # the default hook, writing to a stream of the script's
    harness._WINDOW_STEP[0] = 9
    Probe()  # a logging step: not noted
    monkeypatch.setattr(harness, "_CURRENT", SimpleNamespace(_window_open=False, _counts_views=True))
    harness._WINDOW_STEP[0] = 3
    Probe()  # outside the window: not noted
    noted = harness.op_errors()
    assert noted == ["an error swallowed by the interpreter (IndexError in a partial, handed to sys.unraisablehook) x2"]


def test_processes_beyond_the_loaders_workers_are_counted():
    """On a CPU a process of the script's own can read what the training process writes into memory they share
    (red team 51's relay_pool_01): the processes under the run beyond its DataLoader's workers are counted, at the
    first step or the window's close (a loader that is not persistent starts new workers each epoch), leaving out
    multiprocessing's forkserver and resource tracker."""
    from types import SimpleNamespace

    from checker.checks.host_syncs import _own_processes

    def run(first, close, workers=None, helpers=()):
        raw = {"loader": {"num_workers": workers}} if workers is not None else {"loader": None}
        return SimpleNamespace(workers_at_first_step=set(first), workers_at_close=set(close), raw=raw,
                               multiprocessing_helpers=set(helpers))

    assert _own_processes(run({1, 2}, {3, 4}, workers=2)) == 0  # new workers each epoch
    assert _own_processes(run({1, 2, 9}, {3, 4, 9}, workers=2)) == 1  # a helper beside them
    assert _own_processes(run({9}, {9})) == 1  # no DataLoader: any process is the script's
    assert _own_processes(run({1, 2, 8}, {1, 2, 8}, workers=2, helpers={8})) == 0  # a forkserver
    assert _own_processes(run(set(), set())) == 0 and _own_processes(None) == 0
