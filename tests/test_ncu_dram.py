"""ncu_dram on real chapter 05 traces from an H200 (tests/data/traces/ch05/README.md says how they were made):
which kernel the check hands to ncu, the -k filter it builds, and the CSV ncu wrote for the lab.

Everything here runs on a CPU: ncu itself is replaced by a stand-in that records its arguments.
"""

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from checker.checks import FAILED
from checker.checks import ncu_dram as ncu
from checker.trace.analyses.counts import hottest_kernels
from checker.trace import load

DATA = Path(__file__).resolve().parent / "data" / "traces" / "ch05"

# How ncu 2025.3 writes the demangled names of two of the lab's kernels. The sigmoid one is in lab-ncu-raw.csv;
# the others follow the same pattern, once without and once with namespaces and casts (ncu prints both forms).
NCU_MUL = "void vectorized_elementwise_kernel<4, BinaryFunctor<float, float, float, MulFunctor<float>>, array<char *, 3>>(int, T2, T3)"
NCU_MUL_LONG = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::BinaryFunctor<float, float, float, "
                "at::native::binary_internal::MulFunctor<float>>, std::array<char *, (unsigned long)3>>(int, T2, T3)")
NCU_FILL = ("void at::native::vectorized_elementwise_kernel<(int)4, at::native::FillFunctor<float>, "
            "std::array<char *, (unsigned long)1>>(int, T2, T3)")
NCU_MUL_UNVECTORIZED = ("void elementwise_kernel<128, 2, gpu_kernel_impl_nocast<BinaryFunctor<float, float, float, "
                        "MulFunctor<float>>>(TensorIteratorBase &, const T1 &)::[lambda(int) (instance 1)]>(int, T3)")


@pytest.fixture(scope="module")
def solution():
    return load(str(DATA / "solution-kineto.json.gz"))


@pytest.fixture(scope="module")
def lab():
    return load(str(DATA / "lab-kineto.json.gz"))


def _regex(kernel_filter: str) -> re.Pattern:
    assert kernel_filter.startswith("regex:")
    return re.compile(kernel_filter[len("regex:"):])


def _lab_csv_rows():
    return ncu.parse_ncu_raw_csv((DATA / "lab-ncu-raw.csv").read_text())


def _launch_tids(trace, kernel_name: str) -> set[int]:
    """The host threads whose calls launched the kernels of this name, joined here by correlation id."""
    events = trace.events
    kernels = events[(events["kind"] == "kernel") & (events["name"] == kernel_name) & events["step"].notna()]
    api = events[events["kind"] == "cuda_api"][["pid", "correlation", "tid"]]
    joined = kernels[["pid", "correlation"]].merge(api, on=["pid", "correlation"], how="left")
    return set(joined["tid"].dropna().astype(int))


# -- which kernel ---------------------------------------------------------------------------------------------
def test_solution_kernel_is_launched_from_the_thread_holding_the_steps(solution):
    hot = hottest_kernels(solution, limit=None)
    target, rule, skipped = ncu.pick_kernel(hot)
    assert "thread holding the step ranges" in rule
    # The overall hottest is a backward kernel, launched from autograd's thread: ncu's NVTX filter misses it.
    assert "backward" in hot.iloc[0]["name"]
    assert list(skipped["name"])[:1] == [hot.iloc[0]["name"]]
    # The chosen one is a forward Triton kernel, and every launch of it comes from the stepping thread.
    assert target["name"].startswith("triton_") and "backward" not in target["name"]
    step_tids = set(solution.get_steps()["tid"].astype(int))
    assert _launch_tids(solution, target["name"]) <= step_tids
    assert not _launch_tids(solution, hot.iloc[0]["name"]) & step_tids


def test_lab_kernel_filter_matches_the_mul_kernel_not_the_sigmoid_one(lab):
    target, _rule, skipped = ncu.pick_kernel(hottest_kernels(lab, limit=None))
    assert skipped.empty  # the lab's hottest kernel is launched from the stepping thread too
    assert target["short"] == "vectorized_elementwise_kernel<MulFunctor>"
    regex = _regex(ncu.kernel_filter(target["name"]))
    assert regex.search(NCU_MUL) and regex.search(NCU_MUL_LONG)
    sigmoid = _lab_csv_rows()[0]["kernel"]  # what the old, name-only filter profiled instead
    assert "sigmoid_kernel_cuda" in sigmoid
    assert _regex(ncu.kernel_regex(target["name"])).search(sigmoid)
    for other in (sigmoid, NCU_FILL, NCU_MUL_UNVECTORIZED):
        assert not regex.search(other), other


def test_kernel_filter_keeps_the_function_names_apart(lab):
    names = {short: name for short, name in zip(*[hottest_kernels(lab, limit=None)[c] for c in ("short", "name")])}
    unvectorized = _regex(ncu.kernel_filter(names["elementwise_kernel<MulFunctor>"]))
    assert unvectorized.search(NCU_MUL_UNVECTORIZED)
    assert not unvectorized.search(NCU_MUL)  # 'vectorized_elementwise_kernel<' holds 'elementwise_kernel<'
    fill = _regex(ncu.kernel_filter(names["vectorized_elementwise_kernel<FillFunctor>"]))
    assert fill.search(NCU_FILL) and not fill.search(NCU_MUL_LONG)


def test_triton_names_keep_exact_boundary_matching():
    name = "triton_per_fused__to_copy_add_gelu_mul_native_layer_norm_sigmoid_4"
    kernel_filter = ncu.kernel_filter(name)
    assert kernel_filter == f"regex:{name}([^0-9A-Za-z_]|$)"
    regex = _regex(kernel_filter)
    assert regex.search(name)
    assert not regex.search(name + "1")


def test_anonymous_namespace_kernels_get_their_own_name():
    name = "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float, false>(int, float)"
    regex = _regex(ncu.kernel_filter(name))
    assert regex.search("void vectorized_layer_norm_kernel<float, float, (bool)0>(int, T1, const T1 *)")
    assert not regex.search(NCU_MUL)


# -- the lab's ncu CSV ----------------------------------------------------------------------------------------
def test_lab_ncu_csv_still_parses():
    rows = _lab_csv_rows()
    assert len(rows) == 1
    summary = ncu.summarize_kernel(rows[0])
    assert summary["kernel"].startswith("void vectorized_elementwise_kernel<4, sigmoid_kernel_cuda")
    assert summary["duration_us"] == pytest.approx(61.79)
    assert summary["dram_bytes"] == 134_234_368 + 110_168_064
    assert summary["dram_gbytes_per_s"] == pytest.approx(3955.2, abs=0.1)


# -- the whole check, with a stand-in for ncu -----------------------------------------------------------------
def test_check_on_the_solution_says_which_kernel_it_skipped(solution, tmp_path, fake_ncu):
    calls, grade = fake_ncu((DATA / "lab-ncu-raw.csv").read_text(), 4.0e12)
    outcome = grade(solution)
    profile = json.loads(calls.read_text().splitlines()[0])
    assert profile[profile.index("-k") + 1] == \
        "regex:triton_per_fused__to_copy_add_gelu_mul_native_layer_norm_sigmoid_4([^0-9A-Za-z_]|$)"
    assert "thread holding the step ranges" in outcome.measured["thread_rule"]
    assert outcome.measured["kernel_short"] == "triton_per_fused__to_copy_add_gelu_mul_native_layer_norm_sigmoid_4"
    assert outcome.measured["hot_kernel_step_thread_calls_per_step"] > 0
    skipped = [line for line in outcome.evidence if line.startswith("skipped ")]
    assert len(skipped) == 1 and "gelu_backward" in skipped[0] and "autograd's thread" in skipped[0]


def test_check_fails_without_running_ncu_when_no_kernel_is_on_the_stepping_thread(tmp_path, fake_ncu):
    from checker.trace.events import finish

    calls, grade = fake_ncu((DATA / "lab-ncu-raw.csv").read_text(), 4.0e12)
    main, autograd = 10, 11
    frame = pd.DataFrame([
        ("cuda_api", "cuLaunchKernel", 100, 110, 1, autograd, None, 7, 20),
        ("kernel", "triton_per_fused_gelu_backward_0", 200, 900, 1, 7, 0, 7, 20),
    ], columns=["kind", "name", "start_ns", "end_ns", "pid", "tid", "device", "correlation", "step"])
    steps = pd.DataFrame({"step": [20], "name": ["step 20"], "start_ns": [0], "end_ns": [1000], "pid": [1],
                          "tid": [main]})
    trace = SimpleNamespace(events=finish(frame), get_steps=lambda: steps)
    trace.get_hottest_kernels = lambda limit=None: hottest_kernels(trace, limit)
    outcome = grade(trace)
    assert outcome.status == FAILED
    assert "thread holding the step ranges" in outcome.measured["thread_rule"]
    assert "none of the 1 elementwise kernels" in outcome.evidence[0]
    assert not calls.exists()  # ncu never ran
