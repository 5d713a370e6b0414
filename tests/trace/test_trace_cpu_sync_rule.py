"""The CPU-only sync rule, checked against what torch.profiler records for each Python idiom.

On a CPU trace a host sync is an ``aten::_local_scalar_dense``, an ``aten::nonzero`` or a ``torch.unique`` op (see
checker/trace/analyses/syncs.py). These tests profile each idiom on the CPU, inside a ``step 0`` range,
and count what the engine finds.
"""

from __future__ import annotations

import io

import pytest

torch = pytest.importorskip("torch")

from checker.trace import load  # noqa: E402


def count_syncs(tmp_path, fn, with_stack: bool = False) -> int:
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], with_stack=with_stack) as prof:
        with record_function("step 0"):
            fn()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return load(path).summary()["host_syncs_in_steps"]


t = torch.arange(-3.0, 5.0)
loss = t.sum()
mask = t > 0

IDIOMS = {
    "loss.item()": (lambda: loss.item(), 1),
    "float(loss)": (lambda: float(loss), 1),
    "bool(loss > 0)": (lambda: bool(loss > 0), 1),
    "if t.any():": (lambda: 1 if (t > 0).any() else 0, 1),
    'f"{loss}"': (lambda: f"{loss}", 1),
    "x[mask]": (lambda: t[mask], 1),
    "torch.nonzero(t)": (lambda: torch.nonzero(t), 1),
    "torch.unique(t)": (lambda: torch.unique(t), 1),
    "torch.unique(t, return_counts=True)": (lambda: torch.unique(t, return_counts=True), 1),
    "t.unique_consecutive()": (lambda: t.unique_consecutive(), 1),
    "repeat_interleave without output_size (two reads on the CPU)": (lambda: torch.repeat_interleave(t.long().clamp(min=0)), 2),
    "repeat_interleave(..., output_size=)": (lambda: torch.repeat_interleave(torch.arange(3), torch.tensor([1, 2, 0]), output_size=3), 0),
    "t.tolist() (unseen on the CPU without Python frames)": (lambda: t.tolist(), 0),
    "t + 1 (no sync)": (lambda: t + 1, 0),
    "torch.tensor_split(t, indices) (a tensor of indices, read)": (lambda: torch.tensor_split(t, torch.tensor([2, 5])), 1),
    "torch.tensor_split(t, 3) (Python ints, no read)": (lambda: torch.tensor_split(t, 3), 0),
    "pack_padded_sequence (its lengths, read)": (lambda: torch.nn.utils.rnn.pack_padded_sequence(
        t.reshape(2, 4, 1), torch.tensor([4, 2]), batch_first=True), 1),
}


@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_each_idiom(tmp_path, idiom):
    fn, expected = IDIOMS[idiom]
    assert count_syncs(tmp_path, fn) == expected


def test_printing_a_tensor_reads_it_several_times(tmp_path):
    assert count_syncs(tmp_path, lambda: print(loss, file=io.StringIO())) >= 2


class Wrapped(torch.Tensor):
    pass


# with Python frames (with_stack=True, as the workbook records), the calls that read a tensor into Python without an
# aten op that reads one are seen: each counts once
READS_WITH_STACK = {
    "t.tolist()": (lambda: t.tolist(), 1),
    "torch.Tensor.tolist(t)": (lambda: torch.Tensor.tolist(t), 1),
    "a subclass's tolist()": (lambda: t.as_subclass(Wrapped).tolist(), 1),
    "t.numpy()": (lambda: t.numpy(), 1),
    "np.asarray(t)": (lambda: __import__("numpy").asarray(t), 1),
    "t.cpu()": (lambda: t.cpu(), 1),
    "t.apply_(fn) (each value handed to Python)": (lambda: t.clone().apply_(lambda v: v), 1),
    "t.map_(u, fn)": (lambda: t.clone().map_(t, lambda a, b: a), 1),
    "a storage written to a file (_write_file)": (lambda: t.untyped_storage()._write_file(
        __import__("tempfile").TemporaryFile(), True, True, 4), 1),
    "t.untyped_storage().tolist() (its tolist, and a read per byte)": (lambda: t.untyped_storage().tolist(), 33),
    "set(t.tolist()) and a list indexed by its values": (lambda: [0] * 9 and set(t.long().clamp(min=0).tolist()), 1),
    "loss.item() (its aten op, counted once)": (lambda: loss.item(), 1),
    "t + 1 (no sync)": (lambda: t + 1, 0),
    # counted whatever the receiver is called: a tensor subclass can be named numpy's (red team 39's numpyname_06),
    # and a lab's step holds no numpy array or memoryview of its own
    "a numpy array's tolist() (no tensor)": (lambda: __import__("numpy").arange(3).tolist(), 1),
    "a numpy scalar's and a memoryview's tolist()": (lambda: (__import__("numpy").float64(2).tolist(),
                                                           memoryview(b"ab").tolist()), 2),
}


@pytest.mark.parametrize("idiom", list(READS_WITH_STACK))
def test_each_python_read_with_stack(tmp_path, idiom):
    fn, expected = READS_WITH_STACK[idiom]
    assert count_syncs(tmp_path, fn, with_stack=True) == expected


def test_the_grader_s_own_data_code_reads_nothing_and_excuses_nothing(tmp_path):
    """KeyedOrder (checker/base) draws the window's batch order in Python: no read, in a fetch (a `data` range) or
    in the step's body. Nothing is excused by the code that made a read (red team 39's launder_06 had the grader's
    code read the script's tensors in the fetch), so the script's own read beside it counts."""
    from torch.profiler import record_function

    from checker.base.workloads import KeyedOrder

    order = KeyedOrder([t, t])
    order.set_key(3)

    def fetched():
        with record_function("data"):
            return list(order)

    assert count_syncs(tmp_path, fetched, with_stack=True) == 0
    assert count_syncs(tmp_path, lambda: (fetched(), t.tolist()), with_stack=True) == 1
    assert count_syncs(tmp_path, lambda: list(order), with_stack=True) == 0
