"""Chapters 04 (eager micro-ops) and 05 (fp32 pointwise chains): their checks, and the CPU verdicts a learner sees.

The unit tests build small event tables and an ncu CSV by hand; the slow tests run `workbook check` in a
subprocess on the CPU, as CI does on a fresh clone.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from checker.checks import FAILED, PASSED, SKIPPED
from checker.checks import ncu_dram as ncu
from checker.checks._fewer import fewer_by
from checker.trace.analyses import counts as step_counts
from checker.base.chapters import get_chapter

ROOT = Path(__file__).resolve().parent.parent


# -- counting launches and passes in an event table -----------------------------------------------------------
def _events(rows):
    """An event table in the trace engine's shape from (kind, name, start_ns, end_ns, tid, step) tuples."""
    from checker.trace.events import finish

    frame = pd.DataFrame(rows, columns=["kind", "name", "start_ns", "end_ns", "tid", "step"])
    frame["pid"] = 1
    return finish(frame)


def _trace(rows, steps):
    """A stand-in for TraceAnalysis over these rows: its events, its steps and the analyses the checks use."""
    events = _events(rows)
    trace = SimpleNamespace(events=events, get_steps=lambda: pd.DataFrame({"step": steps}),
                            window_steps=lambda: events["step"])  # its rows lie in steps: no gap to fill
    trace.get_hottest_kernels = lambda limit=5: step_counts.hottest_kernels(trace, limit)
    return trace


def test_top_level_aten_ops_leave_out_the_ops_called_inside_them():
    trace = _trace([
        ("cpu_op", "aten::layer_norm", 0, 100, 1, 0),
        ("cpu_op", "aten::native_layer_norm", 10, 90, 1, 0),  # inside layer_norm: part of it
        ("cpu_op", "aten::empty", 20, 30, 1, 0),
        ("cpu_op", "aten::mul", 100, 120, 1, 0),  # starts where layer_norm ends: top level
        ("cpu_op", "aten::add", 15, 25, 2, 0),  # another thread: top level
        ("cpu_op", "MulBackward0", 130, 200, 1, 0),  # not an aten op
        ("cpu_op", "aten::sigmoid_backward", 140, 190, 1, 0),  # inside an autograd node, still top-level aten
    ], steps=[0])
    names = sorted(step_counts.top_level_aten_ops(trace.events)["name"].astype(str))
    assert names == ["aten::add", "aten::layer_norm", "aten::mul", "aten::sigmoid_backward"]


def test_cpu_launch_count_is_top_level_aten_ops_per_step():
    rows = []
    for step in (3, 4):
        base = step * 1000
        rows += [("cpu_op", "aten::mul", base + 10 * i, base + 10 * i + 5, 1, step) for i in range(6)]
        rows += [("cpu_op", "aten::_foreach_add_", base + 100, base + 200, 1, step),
                 ("cpu_op", "aten::add_", base + 110, base + 120, 1, step)]  # the foreach's own loop
    count = step_counts.count_launches(_trace(rows, steps=[3, 4]), "cpu")
    assert count.unit == "top-level aten ops" and count.per_step == 7
    assert count.top[0] == ("aten::mul", 6.0)


def test_cuda_launch_count_counts_launch_calls_and_graph_replays_once():
    rows = [
        ("cuda_api", "cudaLaunchKernel", 10, 15, 1, 0),
        ("cuda_api", "cuLaunchKernel", 20, 25, 1, 0),  # a Triton kernel
        ("cuda_api", "cudaGraphLaunch", 30, 40, 1, 0),  # one replay, however many kernels
        ("cuda_api", "cudaMemcpyAsync", 50, 55, 1, 0),  # not a kernel launch
        ("cuda_api", "cudaLaunchKernelExC", 60, 65, 1, 1),
        ("kernel", "triton_poi_fused_add_0", 100, 110, 7, 0),
    ]
    count = step_counts.count_launches(_trace(rows, steps=[0, 1]), "cuda")
    assert count.unit == "kernel launches" and count.total == 4 and count.per_step == 2
    assert count.extra["graph_launches_per_step"] == 0.5


def test_cuda_launches_are_named_after_the_aten_op_that_made_them():
    rows = [
        ("cpu_op", "aten::lerp_", 0, 50, 1, 0),
        ("cuda_api", "cudaLaunchKernel", 10, 20, 1, 0),
        ("cpu_op", "aten::addcdiv_", 60, 90, 1, 0),
        ("cuda_api", "cudaLaunchKernel", 70, 80, 1, 0),
        ("cuda_api", "cudaLaunchKernel", 95, 99, 1, 0),  # outside any op
    ]
    count = step_counts.count_launches(_trace(rows, steps=[0]), "cuda")
    assert dict(count.top) == {"aten::lerp_": 1.0, "aten::addcdiv_": 1.0, "cudaLaunchKernel": 1.0}


def test_elementwise_kernels_leave_out_matmuls_and_the_optimizer():
    names = [
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)>(int)",
        "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float)",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>(at::native::ReduceOp<float>)",
        "triton_per_fused_add_gelu_mul_native_layer_norm_sigmoid_0",
        "triton_red_fused_sum_1",
        "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32",  # a matmul
        "nvjet_tst_128x64_64x8_1x2_h_bz_NNT",  # a matmul
        "void at::native::(anonymous namespace)::multi_tensor_apply_kernel<FusedAdamMathFunctor>(...)",  # optimizer
    ]
    rows = [("kernel", name, 10 * i, 10 * i + 5, 7, 0) for i, name in enumerate(names)]
    kept = step_counts.elementwise_kernels(_events(rows))["name"].astype(str).tolist()
    assert kept == names[:5]


def test_cpu_pass_count_takes_every_top_level_op_but_views_products_and_allocations():
    """On a CPU every top-level aten op of a step that passes over memory counts, whatever it is named: a chain
    written with torch._foreach_* on one-tensor lists or var_mean is still one pass per op."""
    rows = [
        ("cpu_op", "aten::mul", 0, 5, 1, 0),
        ("cpu_op", "aten::add_", 10, 15, 1, 0),
        ("cpu_op", "aten::layer_norm", 20, 40, 1, 0),
        ("cpu_op", "aten::native_layer_norm", 21, 39, 1, 0),
        ("cpu_op", "aten::addmm", 50, 60, 1, 0),
        ("cpu_op", "aten::_fused_adamw_", 70, 80, 1, 0),
        ("cpu_op", "aten::item", 90, 95, 1, 0),
        ("cpu_op", "aten::_foreach_sigmoid", 100, 105, 1, 0),
        ("cpu_op", "aten::var_mean", 110, 115, 1, 0),
        ("cpu_op", "aten::view", 120, 121, 1, 0),
        ("cpu_op", "aten::t", 122, 123, 1, 0),
        ("cpu_op", "aten::empty", 124, 125, 1, 0),
        ("cpu_op", "aten::mv", 126, 130, 1, 0),
        ("cpu_op", "aten::set_", 131, 132, 1, 0),  # a storage swapped in (red team 67: once counted as a pass)
    ]
    count = step_counts.count_elementwise(_trace(rows, steps=[0]), "cpu")
    assert {name for name, _ in count.top} >= {"aten::mul", "aten::add_", "aten::layer_norm", "aten::_fused_adamw_",
                                               "aten::_foreach_sigmoid", "aten::var_mean"}
    assert count.total == 6  # addmm, item, view, t, empty, mv and set_ are no pass; native_layer_norm is inside layer_norm


def test_ops_at_any_depth_are_the_ops_that_call_no_other():
    """The count at any depth: a composite op counts as the ops it calls, and ops run inside another op (by a hook
    it calls) count as if run at the top level."""
    rows = [
        ("cpu_op", "aten::layer_norm", 0, 100, 1, 0),
        ("cpu_op", "aten::native_layer_norm", 10, 90, 1, 0),
        ("cpu_op", "aten::empty", 20, 30, 1, 0),  # the leaf of layer_norm's chain
        ("cpu_op", "aten::mul", 100, 200, 1, 0),  # starts where layer_norm ends
        ("cpu_op", "aten::sigmoid", 110, 120, 1, 0),  # a chain run inside mul (by a hook it calls)
        ("cpu_op", "aten::add", 130, 140, 1, 0),
        ("cpu_op", "aten::gelu", 150, 160, 1, 0),
        ("cpu_op", "aten::add", 15, 25, 2, 0),  # another thread's op is its own
    ]
    events = _events(rows)
    leaves = step_counts.leaf_ops(step_counts.aten_ops(events))
    assert sorted(leaves["name"].astype(str)) == ["aten::add", "aten::add", "aten::empty", "aten::gelu", "aten::sigmoid"]
    # passes: empty is no pass, so native_layer_norm is the leaf pass of layer_norm
    passes = step_counts.leaf_pass_ops(events)
    assert sorted(passes["name"].astype(str)) == ["aten::add", "aten::add", "aten::gelu", "aten::native_layer_norm",
                                                  "aten::sigmoid"]
    trace = _trace(rows, steps=[0])
    launches, elementwise = step_counts.count_launches(trace, "cpu"), step_counts.count_elementwise(trace, "cpu")
    assert (launches.total, launches.nested) == (3, 5) and (elementwise.total, elementwise.nested) == (3, 5)


def _fewer_check(candidate_rows, baseline_rows, threshold=2.0, windows=None, options=None, run=None):
    """elementwise_kernels's rule over these rows on a CPU; ``windows``: the traced pair's (baseline, candidate)
    windows in seconds, as the grader's clock gave them; ``run``: the candidate's traced run (its count of tensors
    crossed to numpy)."""
    from checker.base.chapters import CheckSpec
    from checker.checks._fewer import fewer_than_baseline

    traces = {"candidate": _trace(candidate_rows, steps=[0]), "baseline": _trace(baseline_rows, steps=[0])}
    traced = None if windows is None else tuple(SimpleNamespace(window_s=w) for w in windows)
    evidence = SimpleNamespace(device="cpu", timed=[], trace_tool="torch", traced=traced,
                               trace=lambda which="candidate": traces[which], candidate_run=run)
    spec = CheckSpec(name="elementwise_kernels", doc="", threshold={"cpu": threshold}, skip={}, options=options or {})
    return fewer_than_baseline(evidence, spec, step_counts.count_elementwise, "elementwise_fewer_by",
                               gone="all fused away")


def _chain(start, names, tid=1):
    return [("cpu_op", f"aten::{name}", start + 10 * i, start + 10 * i + 5, tid, 0) for i, name in enumerate(names)]


CHAIN = ["mul", "sigmoid", "add", "gelu", "mul", "add"]


def test_a_chain_moved_inside_one_op_is_as_many_passes_as_before():
    """Six passes at the top level, then the same six run inside one aten::mul (as a hook inside it runs them): one
    pass at the top level, six at any depth, and the check fails on the second count."""
    inside = [("cpu_op", "aten::mul", 0, 1000, 1, 0)] + _chain(100, CHAIN)
    outcome = _fewer_check(inside, _chain(0, CHAIN))
    assert outcome.status == FAILED, outcome.evidence
    assert outcome.measured["elementwise_fewer_by"] == 6 and outcome.measured["any_depth_fewer_by"] == 1
    assert any("still run inside other ops" in line for line in outcome.evidence)


def test_a_chain_made_shorter_is_fewer_at_every_depth():
    fused = [("cpu_op", "aten::add", 0, 5, 1, 0), ("cpu_op", "aten::mul", 10, 15, 1, 0)]
    outcome = _fewer_check(fused, _chain(0, CHAIN))
    assert outcome.status == PASSED, outcome.evidence
    assert outcome.measured["any_depth_fewer_by"] == 3 and any("at any depth" in line for line in outcome.evidence)


def test_operators_of_every_namespace_are_ops_and_passes():
    """A chain's passes run as operators of another namespace (oneDNN's fused linear, a library's own op) are ops and
    passes as aten's are; the autograd engine's own records are neither."""
    rows = [
        ("cpu_op", "mkldnn::_linear_pointwise", 0, 10, 1, 0),
        ("cpu_op", "mylib::fused_chain", 20, 30, 1, 0),
        ("cpu_op", "aten::mul", 40, 50, 1, 0),
        ("cpu_op", "autograd::engine::evaluate_function: MulBackward0", 60, 100, 1, 0),
        ("cpu_op", "aten::mul", 70, 80, 1, 0),  # inside the engine's record: still top level
        ("cpu_op", "torch::autograd::AccumulateGrad", 110, 130, 1, 0),
        ("cpu_op", "MulBackward0", 140, 150, 1, 0),
        ("cpu_op", "profiler::chain", 160, 170, 1, 0),  # a library's op in the profiler's namespace is an op
    ]
    trace = _trace(rows, steps=[0])
    launches, elementwise = step_counts.count_launches(trace, "cpu"), step_counts.count_elementwise(trace, "cpu")
    assert (launches.total, launches.nested) == (5, 5) and (elementwise.total, elementwise.nested) == (5, 5)
    assert {name for name, _ in launches.top} == {"mkldnn::_linear_pointwise", "mylib::fused_chain", "aten::mul",
                                                  "profiler::chain"}


def test_on_a_cpu_a_count_lowered_by_slower_steps_fails():
    """Fewer passes at every depth, but the traced steps took three times the slow script's: the passes went where
    no operator is counted (Python's arithmetic), which costs time; fusion does not."""
    fused = [("cpu_op", "aten::add", 0, 5, 1, 0), ("cpu_op", "aten::mul", 10, 15, 1, 0)]
    slow = _fewer_check(fused, _chain(0, CHAIN), windows=(0.03, 0.09))
    assert slow.status == FAILED and slow.measured["traced_slower_by"] == 3
    assert any("3.00x its time (on a CPU at most 2x)" in line for line in slow.evidence), slow.evidence
    assert _fewer_check(fused, _chain(0, CHAIN), windows=(0.03, 0.05)).status == PASSED
    strict = _fewer_check(fused, _chain(0, CHAIN), windows=(0.03, 0.033), options={"cpu_slower_at_most": 1.0})
    assert strict.status == FAILED and "at most 1x" in " ".join(strict.evidence)


def test_on_a_cpu_a_count_lowered_by_work_in_numpy_fails():
    """Fewer passes at every depth and no slower, but tensors crossed to numpy in the window (red team 28's passes
    run in numpy inside an autograd Function): the work left PyTorch's counts, so the count proves nothing. A run that
    sent no count fails too; one with none crossed passes."""
    fused = [("cpu_op", "aten::add", 0, 5, 1, 0), ("cpu_op", "aten::mul", 10, 15, 1, 0)]
    crossed = _fewer_check(fused, _chain(0, CHAIN), run=SimpleNamespace(tensor_views=12))
    assert crossed.status == FAILED and crossed.measured["crossings_to_numpy"] == 12
    assert any("crossed to numpy" in line for line in crossed.evidence), crossed.evidence
    silent = _fewer_check(fused, _chain(0, CHAIN), run=SimpleNamespace(tensor_views=None))
    assert silent.status == FAILED and any("sent no count" in line for line in silent.evidence)
    assert _fewer_check(fused, _chain(0, CHAIN), run=SimpleNamespace(tensor_views=0)).status == PASSED


@pytest.mark.parametrize("name, short", [
    ("void at::native::vectorized_elementwise_kernel<4, at::native::sigmoid_kernel_cuda(at::TensorIteratorBase&)::"
     "{lambda()#1}>(int, float)", "vectorized_elementwise_kernel<sigmoid_kernel_cuda>"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
     "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, float)",
     "vectorized_elementwise_kernel<MulFunctor>"),
    ("triton_poi_fused__to_copy_add_0", "triton_poi_fused__to_copy_add_0"),
    ("void at::native::reduce_kernel<512, 1>(int)", "reduce_kernel"),
])
def test_kernel_names_are_shortened_for_people(name, short):
    assert step_counts.short_kernel_name(name) == short


def test_fewer_by():
    assert fewer_by(100, 10) == 10
    assert fewer_by(100, 0) == float("inf")
    assert fewer_by(0, 0) == 1.0


# -- Nsight Compute: the CSV, the filter, the skips ------------------------------------------------------------
# A sample constructed by hand in the layout of `ncu --import R --csv --page raw` as documented by Nsight
# Compute (identity columns, then one column per metric; a second row of units; one row per profiled kernel;
# thousands separators in values), with the ==PROF== lines ncu prints around it. It is not a capture from a
# real run: replace it with one from the GPU machine (`WORKBOOK_NCU_OUT=... workbook check 05 --with-ncu`).
NCU_RAW_CSV = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size","Device","CC","dram__bytes.sum.per_second","dram__bytes_read.sum","dram__bytes_write.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_sustained_elapsed"
"","","","","","","","","","","","Tbyte/second","Mbyte","Mbyte","%","%","usecond","%"
"0","4242","python3.12","gpu-host","triton_per_fused_add_gelu_mul_native_layer_norm_sigmoid_0","1","7","(512, 1, 1)","(32768, 1, 1)","0","9.0","2.95","134.22","67.11","88.41","88.41","68.24","21.37"
==PROF== Disconnected from process 4242
"""


def test_ncu_raw_csv_is_read_in_base_units():
    rows = ncu.parse_ncu_raw_csv(NCU_RAW_CSV)
    assert len(rows) == 1
    row = rows[0]
    assert row["kernel"] == "triton_per_fused_add_gelu_mul_native_layer_norm_sigmoid_0"
    assert row["metrics"][ncu.DRAM_READ] == pytest.approx(134.22e6)
    assert row["metrics"][ncu.DURATION] == pytest.approx(68.24e-6)
    summary = ncu.summarize_kernel(row)
    assert summary["dram_gbytes_per_s"] == pytest.approx(2950.0)
    assert summary["dram_throughput_pct_of_peak"] == pytest.approx(88.41)
    assert summary["sm_throughput_pct_of_peak"] == pytest.approx(21.37)
    assert summary["dram_bytes"] == 201_330_000 and summary["duration_us"] == pytest.approx(68.24)


def test_ncu_rate_falls_back_to_bytes_over_duration():
    text = (
        '"ID","Kernel Name","dram__bytes_read.sum","dram__bytes_write.sum","gpu__time_duration.sum"\n'
        '"","","byte","byte","nsecond"\n'
        '"0","void at::native::vectorized_elementwise_kernel<4>(int)","1,000,000","1,000,000","1,000"\n'
    )
    summary = ncu.summarize_kernel(ncu.parse_ncu_raw_csv(text)[0])
    assert summary["dram_gbytes_per_s"] == pytest.approx(2000.0)  # 2 MB in 1 us


def test_ncu_output_without_a_table_is_an_error():
    with pytest.raises(ValueError, match="no ncu CSV table"):
        ncu.parse_ncu_raw_csv("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission\n")


@pytest.mark.parametrize("value, unit, base", [
    (1.5, "Gbyte/second", 1.5e9), (2.0, "Kibyte", 2048.0), (3.0, "msecond", 3e-3), (42.0, "%", 42.0),
    (None, "byte", None),
])
def test_ncu_units(value, unit, base):
    assert ncu.to_base_units(value, unit) == (pytest.approx(base) if base is not None else None)


def test_ncu_kernel_filter_matches_one_kernel_not_its_longer_namesakes():
    import re

    pattern = ncu.kernel_regex("triton_poi_fused_add_1")
    assert pattern.startswith("regex:")
    regex = re.compile(pattern[len("regex:"):])
    assert regex.search("triton_poi_fused_add_1")
    assert not regex.search("triton_poi_fused_add_10")
    eager = ncu.kernel_filter("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>(int)")
    eager_regex = re.compile(eager[len("regex:"):])
    assert eager_regex.search("void at::native::vectorized_elementwise_kernel<(int)4, at::native::GeluCUDAKernelImpl>(int)")
    assert not eager_regex.search("void at::native::vectorized_elementwise_kernel<4, X>(int)")  # another op's kernel


def test_ncu_permission_error_becomes_a_skip_reason():
    from checker.grader.ncu import ncu_problem

    assert "NVreg_RestrictProfilingToAdminUsers" in ncu_problem("==ERROR== ERR_NVGPUCTRPERM - no access")
    assert ncu_problem("==PROF== Disconnected") is None


def _ncu_spec():
    return next(c for c in get_chapter("05").checks if c.name == "ncu_dram")


@pytest.mark.parametrize("device, with_ncu, env, reason", [
    ("cpu", True, None, "this run is on cpu"),
    ("cuda", False, None, "--with-ncu"),
    ("cuda", True, "/nonexistent/ncu", "ncu not found"),
])
def test_ncu_check_skips_with_a_reason(monkeypatch, device, with_ncu, env, reason):
    """Not asked, not on a GPU, or no ncu: the plan makes no ncu run, or the grader's ncu step says why."""
    from checker.checks.evidence import Evidence, NcuTarget
    from checker.grader.ncu import profile_kernel
    from checker.grader.plan import make_plan

    if env:
        monkeypatch.setenv("WORKBOOK_NCU", env)
    chapter = get_chapter("05")
    plan = make_plan(chapter, device, with_ncu=with_ncu)
    assert bool(plan.ncu) == (device == "cuda" and with_ncu)
    trace = _trace([("kernel", "triton_poi_fused_mul_0", 0, 700, 7, 20)], steps=[20])
    ncu_found = {name: profile_kernel(SimpleNamespace(), NcuTarget("regex:x", 20, ("SpeedOfLight",)))
                 for name in plan.ncu}
    evidence = Evidence(chapter=chapter, device=device, trace_tool="torch", candidate=chapter.solution_script,
                        cfg=chapter.config(device), traced=(None, None), traces={"candidate": trace}, ncu=ncu_found)
    outcome = ncu.ncu_dram(evidence, _ncu_spec())
    assert outcome.status == SKIPPED and reason in outcome.reason


# -- the verdicts on a CPU, as a learner sees them -----------------------------------------------------------
def _check(workbook, *args):
    proc = workbook("check", *args, "--device", "cpu", "--json")
    assert proc.stdout.strip(), proc.stderr
    return proc, json.loads(proc.stdout)


IDS = {"04": "04_eager_microops", "05": "05_pointwise_chains"}


def _graded(graded, chapter, variant):
    from types import SimpleNamespace

    report = graded(IDS[chapter], variant)
    return SimpleNamespace(returncode=report.exit_code), report.to_json()


def _by_name(report):
    return {c["name"]: c for c in report["checks"]}


@pytest.mark.slow
@pytest.mark.parametrize("chapter", ["04", "05"])
def test_solution_passes_on_cpu(graded, chapter):
    proc, report = _graded(graded, chapter, "solution")
    assert proc.returncode == 0, json.dumps(report, indent=1)
    for c in report["checks"]:
        assert c["status"] in (PASSED, SKIPPED)
        if c["status"] == SKIPPED:
            assert c["reason"], f"{c['name']} skipped without a reason"


@pytest.mark.slow
@pytest.mark.parametrize("chapter, check, unit", [
    ("04", "launches_per_step", "top-level aten ops"),
    ("05", "elementwise_kernels", "aten ops passing over memory"),
])
def test_unmodified_lab_fails_on_cpu_with_evidence(graded, chapter, check, unit):
    proc, report = _graded(graded, chapter, "lab")
    assert proc.returncode == 1, json.dumps(report, indent=1)
    outcome = _by_name(report)[check]
    assert outcome["status"] == FAILED
    assert unit in outcome["evidence"][0] and "1.0x fewer" in outcome["evidence"][0]
    assert outcome["hint"]
    assert _by_name(report)["same_work"]["status"] == PASSED  # the lab does the same work, just slowly


@pytest.mark.slow
def test_a_lab_that_skips_the_optimizer_step_does_different_work(workbook, tmp_path, pristine_lab):
    lab = (pristine_lab("04") / "train.py").read_text()
    assert "    optimizer.step()\n" in lab
    (tmp_path / "train.py").write_text(lab.replace("    optimizer.step()\n", "    pass  # no update\n"))
    proc, report = _check(workbook, "04", "--submission", str(tmp_path))
    assert proc.returncode == 1
    same_work = _by_name(report)["same_work"]
    assert same_work["status"] == FAILED and same_work["evidence"][0].startswith("work differs: its weights are")


def test_ncu_check_profiles_the_hottest_elementwise_kernel(fake_ncu, tmp_path):
    """The whole ncu_dram flow on a CPU: the check picks its target from the trace, the grader's ncu step runs
    it (a stand-in runner records the ncu options it was given; a stand-in ncu replays the sample CSV above for
    --import), the copy bandwidth is fixed in place of the CUDA probe, and the check judges the evidence."""
    calls, grade = fake_ncu(NCU_RAW_CSV, 3.2e12)
    hot = "triton_per_fused_add_gelu_mul_native_layer_norm_sigmoid_0"
    trace = _trace([
        ("kernel", hot, 0, 700, 7, 20),
        ("kernel", "triton_poi_fused_mul_sigmoid_1", 800, 900, 7, 20),
        ("kernel", "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n", 1000, 5000, 7, 20),  # longer, but a matmul
    ], steps=[20])
    outcome = grade(trace)
    assert outcome.status == PASSED, outcome.evidence
    assert outcome.measured["fraction_of_copy"] == pytest.approx(2950 / 3200, abs=1e-3)
    assert outcome.measured["kernel_short"] == hot and "memory-bound" in outcome.evidence[0]
    profile, imported = [json.loads(line) for line in calls.read_text().splitlines()]
    assert profile[profile.index("--nvtx-include") + 1] == "step 20/"
    assert profile[profile.index("-k") + 1] == f"regex:{hot}([^0-9A-Za-z_]|$)"
    assert ["--section", "SpeedOfLight"] == profile[profile.index("--section"):profile.index("--section") + 2]
    assert profile[-2:] == ["--steps", "22"]  # the grader's runner: warm-up to step 20, then the profiled step
    assert imported[:2] == ["--import", str(tmp_path / "profile.ncu-rep")] and "raw" in imported


def test_a_workload_fingerprint_is_the_seeds_alone():
    """scripts/workload_fingerprint.py: the same seed gives the same data, weights and held-out loss on this
    machine; another seed another. Lanes that disagree for one seed built different experiments (gpu_verify's env)."""
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "workload_fingerprint.py"
    spec = importlib.util.spec_from_file_location("workload_fingerprint", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    first, again = module.fingerprint("05", "cpu", 7), module.fingerprint("05", "cpu", 7)
    other = module.fingerprint("05", "cpu", 8)
    assert first == again and first["data"] and first["init"]
    assert other["data"] != first["data"] and other["init"] != first["init"]


def test_what_changes_inductors_fusion_is_noted_by_the_harness():
    """A compiled graph's call counts as one pass on a CPU, which holds for torch.compile's own fusion: options given to
    torch.compile, a fusion setting patched or assigned are noted (red team 40's unfused_05), a default compile is not.
    In a fresh process: what the harness notes lasts for the process."""
    import subprocess
    import sys

    program = """
import torch
from checker.candidate import session
x = torch.randn(8, 8, requires_grad=True)
for mode in (None, "reduce-overhead", "max-autotune-no-cudagraphs"):  # what torch sets itself is not noted
    torch.compile(lambda x: (x.sin() * 2).sum(), mode=mode)(x).backward()
assert session.fusion_changed() == [], session.fusion_changed()
torch.compile(lambda x: x + 1, options={"max_fusion_size": 1})
import torch._inductor.config as config
with config.patch(epilogue_fusion=False):
    pass
config.pattern_matcher = False
config.realize_cpu_opcount_threshold = 0  # a setting no list of fusion settings named (red team 44)
config._post_fusion_custom_pass = lambda nodes: nodes
print(session.fusion_changed())
"""
    out = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr[-2000:]
    noted = out.stdout.strip()
    for expected in ("torch.compile(options=...)", "config.patch(epilogue_fusion)",
                     "torch._inductor.config.pattern_matcher", "torch._inductor.config.realize_cpu_opcount_threshold",
                     "torch._inductor.config._post_fusion_custom_pass"):
        assert expected in noted, noted


def test_inductors_code_replaced_by_the_script_is_noted_and_its_own_is_not():
    """Fusion can be switched off with no setting changed, by replacing Inductor's own methods (red team 61's
    unfuse_meth_05: its scheduler's can_fuse). The harness reads whose code each function and method of Inductor's
    loaded modules is, as Inductor compiles: torch's own (its generated dataclass methods included), the standard
    library's and installed packages' are Inductor's; a function of the script's file, set there directly, through
    staticmethod or functools.partial, or as a callable object of its class, is not."""
    import functools

    import torch._inductor.ir
    import torch._inductor.scheduler

    from checker.candidate import session

    assert session.inductor_code_replaced() == []

    def never_fuse(self, *args, **kwargs):
        return False

    class Never:
        def __call__(self, *args, **kwargs):
            return 0

    scheduler, loops = torch._inductor.scheduler.Scheduler, torch._inductor.ir.Loops
    kept = scheduler.__dict__["can_fuse"], loops.__dict__["has_large_inner_fn"]
    memory = scheduler.__dict__["score_fusion_memory"]
    try:
        scheduler.can_fuse = never_fuse
        loops.has_large_inner_fn = staticmethod(functools.partial(lambda *a, **k: True))
        torch._inductor.scheduler.Scheduler.score_fusion_memory = Never()
        noted = session.inductor_code_replaced()
    finally:
        scheduler.can_fuse, loops.has_large_inner_fn = kept
        scheduler.score_fusion_memory = memory
    assert sorted(n.split(" (")[0] for n in noted) == ["torch._inductor.ir.Loops.has_large_inner_fn",
                                                      "torch._inductor.scheduler.Scheduler.can_fuse",
                                                      "torch._inductor.scheduler.Scheduler.score_fusion_memory"], noted
    assert all(__file__ in n for n in noted), noted
    assert session.inductor_code_replaced() == []
    # a subclass of the script's put in the place of Inductor's class (red team 62's nofuse_sub_05)
    import torch._inductor.compile_fx as compile_fx

    class Unfused(scheduler):
        def fuse_nodes(self, nodes):
            return nodes

    original = compile_fx.__dict__.get("Scheduler", scheduler)
    try:
        compile_fx.Scheduler = torch._inductor.scheduler.Scheduler = Unfused
        noted = session.inductor_code_replaced()
    finally:
        compile_fx.Scheduler = original
        torch._inductor.scheduler.Scheduler = scheduler
    assert noted and all(n.endswith(f"Scheduler.fuse_nodes (code from {__file__})") for n in noted), noted
    assert session.inductor_code_replaced() == []


def test_the_loop_nests_of_generated_cpp_are_its_outermost_loops():
    """A pass over memory is an outermost loop of a kernel's C++: loops inside another's body, and `for(` in a
    comment or a string, are not passes. Inductor's own kernel (session 77): a vectorized loop, then a reduction with
    an inner loop, two passes."""
    from checker.candidate.session import loop_nests

    kernel = '''extern "C" void kernel(float* out) {
    {
        for(int64_t x0=static_cast<int64_t>(0L); x0<static_cast<int64_t>(32768L); x0+=static_cast<int64_t>(8L))
        {
            // for(a stale loop)
            out[x0] = 0;
        }
    }
    {
        for(int64_t x0=0; x0<64; x0+=8)
        {
            float acc = 0; const char* s = "for(";
            for(int64_t x1=0; x1<512; x1+=1) { for(int64_t x2=0; x2<4; x2++) { acc += x1; } }
        }
    }
}'''
    assert loop_nests(kernel) == 2
    assert loop_nests("") == 0
    assert loop_nests("void f() { int format(int); }") == 0  # `format(` is not a loop


def test_a_cpu_count_takes_a_compiled_graph_as_the_loop_nests_its_code_makes():
    """On a CPU a compiled graph's call records one op, whatever its code does: chapter 05's solution made 10 loop
    nests in two graphs, red team 63's registry_nofuse_05 and this bank's lowering_realize_05 (Inductor's lowerings
    and scheduler put out of fusion by routes no walk of Inductor's code sees) about 195. Where the run's nests are
    more than its graph calls per step, the count takes the nests, at the top level and at any depth."""
    from checker.trace.analyses.counts import LOOP_NESTS, StepCount, with_loop_nests

    def count():
        return StepCount("aten ops passing over memory", 8 * 3, 3, [("compiled graph calls", 2.0), ("aten::to", 1.0)],
                         {"compiled_graph_calls_per_step": 2.0}, nested=41 * 3)

    fused = with_loop_nests(count(), 10)
    assert (fused.per_step, fused.nested_per_step) == (16.0, 49.0)
    assert fused.top[0] == (LOOP_NESTS, 10.0) and ("compiled graph calls", 2.0) not in fused.top
    unfused = with_loop_nests(count(), 195)
    assert (unfused.per_step, unfused.nested_per_step, unfused.extra["compiled_loop_nests"]) == (201.0, 234.0, 195)
    assert with_loop_nests(count(), None).per_step == 8.0  # no count sent: the calls alone
    assert with_loop_nests(count(), 1).per_step == 8.0  # fewer nests than calls: the calls count
