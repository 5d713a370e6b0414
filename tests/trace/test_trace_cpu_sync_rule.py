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


def count_syncs(tmp_path, fn) -> int:
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU]) as prof:
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
    "t.tolist() (unseen on the CPU)": (lambda: t.tolist(), 0),
    "t + 1 (no sync)": (lambda: t + 1, 0),
}


@pytest.mark.parametrize("idiom", list(IDIOMS))
def test_each_idiom(tmp_path, idiom):
    fn, expected = IDIOMS[idiom]
    assert count_syncs(tmp_path, fn) == expected


def test_printing_a_tensor_reads_it_several_times(tmp_path):
    assert count_syncs(tmp_path, lambda: print(loss, file=io.StringIO())) >= 2
