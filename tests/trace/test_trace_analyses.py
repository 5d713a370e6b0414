"""Steps and analyses on small hand-made event tables, where every number is known."""

from __future__ import annotations

from collections import Counter

import pytest

from checker.trace import TraceAnalysis, TraceError
from checker.trace.analyses.kernels import family_of
from trace_helpers import make_events

MAIN, BACKWARD, STREAM = 10, 11, 7


def host(kind, name, start, end, tid=MAIN, **extra):
    return {"kind": kind, "name": name, "start_ns": start, "end_ns": end, "pid": 1, "tid": tid, **extra}


def gpu(kind, name, start, end, correlation, **extra):
    return {"kind": kind, "name": name, "start_ns": start, "end_ns": end, "pid": 1, "tid": STREAM, "device": 0,
            "stream": STREAM, "correlation": correlation, **extra}


def analysis(rows, **kwargs) -> TraceAnalysis:
    return TraceAnalysis(make_events(rows), "kineto", source="hand-made", **kwargs)


def test_default_step_pattern():
    rows = [host("range", name, 1000 * i, 1000 * i + 500) for i, name in enumerate(
        ["ProfilerStep#3", "step 4", "batch 5", "iteration 6", "step_7", "steps 8", "my step 9"])]
    assert analysis(rows).get_steps()["step"].tolist() == [3, 4, 5, 6]


def test_nested_step_ranges_count_once_innermost_wins():
    rows = [host("range", "ProfilerStep#0", 0, 1000), host("range", "step 5", 10, 900),
            host("range", "step 5", 10, 900, tid=MAIN),  # NVTX and record_function of the same step
            gpu("range", "step 5", 100, 950, None),      # the GPU-side copy of the range (gpu_user_annotation)
            host("cpu_op", "aten::add", 20, 30)]
    trace = analysis(rows)
    steps = trace.get_steps()
    assert steps["step"].tolist() == [5] and steps["name"].tolist() == ["step 5"]
    assert trace.events.loc[trace.events["name"] == "aten::add", "step"].tolist() == [5]


def test_custom_pattern_and_bad_pattern():
    rows = [host("range", "train_0", 0, 10), host("range", "train_1", 20, 30), host("range", "step 9", 40, 50)]
    assert analysis(rows, step_regex=r"^train_(\d+)$").get_steps()["step"].tolist() == [0, 1]
    with pytest.raises(TraceError, match="not a valid regular expression"):
        analysis(rows, step_regex="step (")


def _sync_rows(step_count=4):
    rows = []
    for i in range(step_count):
        t = 10_000 * i
        rows += [host("range", f"step {i}", t, t + 9_000),
                 host("range", "data", t + 100, t + 1_100),
                 host("cuda_api", "cudaMemcpyAsync", t + 2_000, t + 2_500, correlation=2 * i),
                 host("cuda_api", "cudaStreamSynchronize", t + 2_500, t + 3_000),
                 gpu("memcpy", "Memcpy HtoD (Pageable -> Device)", t + 2_100, t + 2_400, 2 * i, bytes=1000,
                     copy_kind="HtoD", src_kind="pageable", dst_kind="device"),
                 host("cuda_api", "cudaLaunchKernel", t + 4_000, t + 4_100, tid=BACKWARD, correlation=2 * i + 1),
                 gpu("kernel", "void gemm_kernel<float>()", t + 4_200, t + 6_000, 2 * i + 1)]
    rows.append(host("cuda_api", "cudaDeviceSynchronize", 50_000, 50_100))  # outside every step
    return rows


def test_warm_up_steps_are_dropped_and_their_events_leave_the_counts():
    trace = analysis(_sync_rows(), skip_steps=2)
    assert trace.get_steps()["step"].tolist() == [2, 3]
    assert trace.summary()["host_syncs_in_steps"] == 2 and trace.summary()["skipped_steps"] == [0, 1]
    events = trace.events
    assert events.loc[events["kind"] == "kernel", "step"].tolist()[2:] == [2, 3]
    assert events.loc[events["kind"] == "kernel", "step"].isna().sum() == 2
    with pytest.raises(TraceError, match="only 4"):
        analysis(_sync_rows(), skip_steps=4)


def test_work_on_another_thread_and_on_the_gpu_gets_the_step():
    events = analysis(_sync_rows()).events
    assert events.loc[events["tid"] == BACKWARD, "step"].tolist() == [0, 1, 2, 3]
    assert events.loc[events["kind"] == "kernel", "step"].tolist() == [0, 1, 2, 3]


def test_host_syncs_per_step_and_exclusions():
    trace = analysis(_sync_rows())
    per_step = trace.get_host_syncs_per_step(exclude_steps={1})
    assert per_step["step"].tolist() == [0, 2, 3] and per_step["host_syncs"].tolist() == [1, 1, 1]
    assert len(trace.get_host_syncs()) == 4  # the cudaDeviceSynchronize after the last step is not in a step
    assert len(trace.get_host_syncs(exclude_steps=[0, 3])) == 2


def test_trace_without_steps_is_analysed_whole_and_says_so():
    rows = [r for r in _sync_rows() if not str(r["name"]).startswith("step ")]
    trace = analysis(rows)
    summary = trace.summary()
    assert not summary["steps_found"] and summary["steps"] == 0
    assert summary["host_syncs_in_steps"] == 5  # every sync of the trace, the last one too
    assert any("no step ranges matched" in note for note in summary["notes"])
    assert trace.get_host_syncs_per_step()[["step", "host_syncs"]].values.tolist() == [[-1, 5]]
    assert trace.get_kernels_per_step()[["step", "kernels", "launches"]].values.tolist() == [[-1, 4, 4]]


def test_a_copy_into_pageable_host_memory_is_a_sync_once():
    """A device-to-host copy into pageable memory returns when it is done, non_blocking or not: its launch is a sync
    (red team 70's d2h_queued_07); one followed by a sync call (a blocking .cpu()) counts once, at the sync; one into
    pinned memory queued with no sync after it (a prefetch of a value) is none."""
    rows = [host("range", "step 0", 0, 10_000),
            host("cuda_api", "cudaMemcpyAsync", 100, 300, correlation=1),  # host.copy_(value, non_blocking=True)
            gpu("memcpy", "Memcpy DtoH (Device -> Pageable)", 150, 290, 1, bytes=4,
                copy_kind="DtoH", src_kind="device", dst_kind="pageable"),
            host("cuda_api", "cudaLaunchKernel", 310, 320, correlation=2),
            host("cuda_api", "cudaMemcpyAsync", 1000, 1300, correlation=3),  # value.cpu(): a sync follows
            gpu("memcpy", "Memcpy DtoH (Device -> Pageable)", 1100, 1290, 3, bytes=4,
                copy_kind="DtoH", src_kind="device", dst_kind="pageable"),
            host("cuda_api", "cudaStreamSynchronize", 1300, 1500),
            host("cuda_api", "cudaMemcpyAsync", 2000, 2010, correlation=4),  # into pinned memory, queued
            gpu("memcpy", "Memcpy DtoH (Device -> Pinned)", 2050, 2100, 4, bytes=4,
                copy_kind="DtoH", src_kind="device", dst_kind="pinned")]
    syncs = analysis(rows).get_host_syncs()
    assert syncs["name"].tolist() == ["cudaMemcpyAsync", "cudaStreamSynchronize"]
    assert syncs["start_ns"].tolist() == [100, 1300]


def test_driver_syncs_inside_runtime_syncs_count_once_and_sync_copies_count():
    rows = [host("range", "step 0", 0, 10_000),
            host("cuda_api", "cudaStreamSynchronize", 100, 200), host("cuda_api", "cuStreamSynchronize", 110, 190),
            host("cuda_api", "cuCtxSynchronize", 300, 400),         # a driver sync on its own counts
            host("cuda_api", "cudaMemcpy", 500, 600),               # a synchronous copy is a sync
            host("cuda_api", "cudaMemcpyAsync", 700, 800),          # an async one alone is not
            host("cuda_api", "cudaEventSynchronize", 900, 950)]
    names = analysis(rows).get_host_syncs()["name"].tolist()
    assert names == ["cudaStreamSynchronize", "cuCtxSynchronize", "cudaMemcpy", "cudaEventSynchronize"]


def test_a_free_that_waits_for_the_device_is_a_sync():
    """torch.cuda.empty_cache() hands cached blocks back with cudaFree, which waits for the whole device first;
    a queued free (cudaFreeAsync) and an allocation wait for nothing."""
    rows = [host("range", "step 0", 0, 10_000),
            host("cuda_api", "cudaFree", 100, 900), host("cuda_api", "cuMemFree_v2", 150, 850),  # counted once
            host("cuda_api", "cudaFreeAsync", 1000, 1100), host("cuda_api", "cudaMalloc", 1200, 1300),
            host("cuda_api", "cudaFreeHost", 1400, 1500)]
    assert analysis(rows).get_host_syncs()["name"].tolist() == ["cudaFree", "cudaFreeHost"]


def test_cpu_only_trace_counts_local_scalar_dense_and_nonzero_with_their_op():
    rows = [host("range", "step 0", 0, 1000),
            host("cpu_op", "aten::item", 10, 50), host("cpu_op", "aten::_local_scalar_dense", 20, 40),
            host("cpu_op", "aten::index", 100, 200), host("cpu_op", "aten::nonzero", 110, 150),
            host("cpu_op", "aten::add", 300, 310)]
    syncs = analysis(rows).get_host_syncs()
    assert syncs[["name", "op"]].values.tolist() == [["aten::_local_scalar_dense", "aten::item"],
                                                     ["aten::nonzero", "aten::index"]]


def test_where_is_the_users_line_of_the_call_when_torch_records_call_sites():
    rows = [host("range", "step 0", 0, 5000),
            host("python", "train.py(10): <module>", 0, 5000, call_from="train.py:10"),
            host("python", "train.py(30): step_fn", 5, 900, call_from="train.py:12"),
            host("python", "<built-in method item of Tensor object at 0x1>", 50, 80, call_from="train.py:33"),
            host("python", "torch/_tensor.py(100): helper", 52, 79, call_from="train.py:33"),
            host("cuda_api", "cudaStreamSynchronize", 60, 70),
            host("cuda_api", "cudaStreamSynchronize", 200, 210),  # after the call: an operator on its line
            host("python", "train.py(50): other_fn", 1000, 1900, call_from="train.py:13"),
            host("cuda_api", "cudaStreamSynchronize", 1100, 1110)]  # no call in other_fn yet: its own line
    syncs = analysis(rows).get_host_syncs()
    assert syncs["where"].tolist() == ["train.py:33", "train.py:33", "train.py:50"]


def test_library_and_checker_frames_are_not_the_users():
    rows = [host("range", "step 0", 0, 1000),
            host("python", "labs/01/train.py(41): <module>", 0, 1000),
            host("python", "checker/lab.py(99): steps", 10, 900),
            host("python", "/usr/lib/python3.11/site-packages/foo/bar.py(5): f", 20, 800),
            host("python", "contextlib.py(141): __exit__", 30, 700),
            host("cuda_api", "cudaDeviceSynchronize", 40, 50)]
    assert analysis(rows).get_host_syncs()["where"].tolist() == ["labs/01/train.py:41"]


def test_gpu_idle_splits_waiting_on_the_host_from_other_idle_time():
    rows = [host("range", "step 0", 0, 1000),
            host("cuda_api", "cudaLaunchKernel", 50, 60, correlation=1),     # A queued before the GPU had work
            gpu("kernel", "A", 100, 300, 1),
            host("cuda_api", "cudaLaunchKernel", 500, 510, correlation=2),   # B launched 200 ns into the gap
            gpu("kernel", "B", 600, 800, 2),
            host("cuda_api", "cudaLaunchKernel", 1100, 1110, correlation=3),  # C after the step: host wait
            gpu("kernel", "C", 1200, 1300, 3)]
    idle = analysis(rows).get_gpu_idle()
    assert idle.iloc[0].to_dict() == {"step": 0, "window_ns": 1000, "busy_ns": 400, "idle_ns": 600,
                                      "idle_host_wait_ns": 50 + 200 + 200, "idle_other_ns": 50 + 100,
                                      "idle_after_sync_ns": 0, "idle_fraction": 0.6}


def test_gpu_idle_that_began_in_a_host_sync_is_the_syncs():
    us = 1000  # times in microseconds: the clocks' slack (20 us) is far below these gaps
    rows = [host("range", "step 0", 0, 1000 * us),
            host("cuda_api", "cudaLaunchKernel", 10 * us, 11 * us, correlation=1),
            gpu("kernel", "A", 20 * us, 300 * us, 1),
            host("cuda_api", "cudaStreamSynchronize", 100 * us, 301 * us),   # the queue runs dry in it
            host("cuda_api", "cudaLaunchKernel", 500 * us, 501 * us, correlation=2),  # the host back 200 us later
            gpu("kernel", "B", 510 * us, 600 * us, 2),
            host("cuda_api", "cudaLaunchKernel", 550 * us, 551 * us, correlation=3),  # queued while B ran: no wait
            gpu("kernel", "C", 600 * us, 700 * us, 3),
            host("cuda_api", "cudaLaunchKernel", 800 * us, 801 * us, correlation=4),  # a gap no sync began
            gpu("kernel", "D", 810 * us, 1000 * us, 4)]
    idle = analysis(rows).get_gpu_idle().iloc[0]
    assert idle["idle_host_wait_ns"] == (10 + 200 + 100) * us  # before A's launch, after the sync, before D's
    assert idle["idle_after_sync_ns"] == 200 * us  # from A's end, in the sync, to B's launch


def test_overlapping_gpu_work_counts_once():
    rows = [host("range", "step 0", 0, 1000),
            host("cuda_api", "cudaLaunchKernel", 0, 5, correlation=1), gpu("kernel", "A", 0, 600, 1),
            host("cuda_api", "cudaMemcpyAsync", 5, 10, correlation=2),
            gpu("memcpy", "Memcpy HtoD (Pinned -> Device)", 200, 1000, 2, copy_kind="HtoD", src_kind="pinned")]
    idle = analysis(rows).get_gpu_idle()
    assert idle[["busy_ns", "idle_ns"]].values.tolist() == [[1000, 0]]


def test_pageable_copy_asked_for_non_blocking_is_flagged():
    rows = [host("range", "step 0", 0, 10_000),
            host("cpu_op", "aten::copy_", 90, 400),
            host("cuda_api", "cudaMemcpyAsync", 100, 300, correlation=1),   # .to(non_blocking=True): no sync
            gpu("memcpy", "Memcpy HtoD (Pageable -> Device)", 150, 290, 1, bytes=100,
                copy_kind="HtoD", src_kind="pageable", dst_kind="device"),
            host("cuda_api", "cudaLaunchKernel", 310, 320, correlation=2),
            host("cuda_api", "cudaMemcpyAsync", 1000, 1300, correlation=3),  # blocking .to(): a sync follows
            gpu("memcpy", "Memcpy HtoD (Pageable -> Device)", 1100, 1290, 3, bytes=100,
                copy_kind="HtoD", src_kind="pageable", dst_kind="device"),
            host("cuda_api", "cudaStreamSynchronize", 1300, 1500),
            host("cuda_api", "cudaMemcpyAsync", 2000, 2010, correlation=4),  # pinned, non_blocking: fine
            gpu("memcpy", "Memcpy HtoD (Pinned -> Device)", 2050, 2100, 4, bytes=100,
                copy_kind="HtoD", src_kind="pinned", dst_kind="device")]
    trace = analysis(rows)
    copies = trace.get_copies()
    assert copies["pageable"].tolist() == [True, True, False]
    assert copies["non_blocking_requested"].tolist() == [True, False, False]
    assert copies["cpu_blocked_ns"].tolist() == [200, 300 + 200, 10]
    summary = trace.summary()
    assert summary["non_blocking_pageable_copies"] == 1 and summary["pageable_h2d_copies"] == 2
    assert "asked for non_blocking=True" in " ".join(summary["findings"])


def test_data_wait_uses_data_ranges_or_falls_back_to_dataloader_next():
    rows = [host("range", "step 0", 0, 1000), host("range", "data", 0, 250), host("range", "data", 100, 300),
            host("range", "step 1", 1000, 2000), host("range", "data", 1000, 1100)]
    wait = analysis(rows).get_data_wait()
    assert wait["data_wait_ns"].tolist() == [300, 100] and wait["source"].tolist() == ["data range"] * 2
    rows = [host("range", "ProfilerStep#0", 0, 1000),
            host("range", "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 10, 510)]
    wait = analysis(rows).get_data_wait()
    assert wait["data_wait_ns"].tolist() == [500] and wait["source"].tolist() == ["DataLoader __next__"]
    assert wait["data_wait_fraction"].tolist() == [0.5]


@pytest.mark.parametrize("name, family", [
    ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "gemm/conv"),
    ("void cudnn::engines_precompiled::nchwToNhwcKernel<float>()", "gemm/conv"),
    ("triton_poi_fused_add_mul_0", "fused/triton"),
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>()", "reduction"),
    ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>()", "reduction"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>>()", "elementwise"),
    ("void at::native::multi_tensor_apply_kernel<TensorListMetadata<2>>()", "elementwise"),
    ("Kernel2", "other"),
])
def test_kernel_families(name, family):
    assert family_of(name) == family


def test_kernel_launches_and_top_kernels_per_step():
    trace = analysis(_sync_rows())
    per_step = trace.get_kernels_per_step()
    assert per_step[["kernels", "launches", "memcpys"]].values.tolist() == [[1, 1, 1]] * 4
    top = trace.get_top_kernels()
    assert top[["name", "family", "count", "per_step"]].values.tolist() == [
        ["void gemm_kernel<float>()", "gemm/conv", 4, 1.0]]
    families = trace.get_kernel_families().set_index("family")
    assert families.loc["gemm/conv", "count"] == 4 and families.loc["memcpy/memset", "count"] == 4
    assert families["share"].sum() == pytest.approx(1.0)


def test_step_metrics_gather_the_per_step_numbers():
    metrics = analysis(_sync_rows()).get_step_metrics(exclude_steps={3})
    assert metrics["step"].tolist() == [0, 1, 2]
    first = metrics.iloc[0]
    assert (first["dur_ns"], first["host_syncs"], first["kernels"], first["launches"]) == (9_000, 1, 1, 1)
    assert first["gpu_busy_ns"] == 300 + 1_800 and first["gpu_idle_ns"] == 9_000 - 2_100
    assert first["data_wait_ns"] == 1_000


def test_timeline_of_a_trace_without_steps_or_gpu(tmp_path):
    rows = [host("cpu_op", "aten::item", 10, 50), host("cpu_op", "aten::_local_scalar_dense", 20, 40)]
    out = tmp_path / "t.png"
    analysis(rows).timeline(out)
    assert out.stat().st_size > 1000


def test_where_in_a_module_level_loop_is_the_line_of_the_call():
    # <module> was running before profiling began, so its own line is where it stood then (the loop)
    rows = [host("python", "train.py(20): <module>", 0, 5000),
            host("range", "step 0", 100, 10000),
            host("python", "<built-in method item of Tensor object at 0x1>", 200, 300, call_from="train.py:41"),
            host("cuda_api", "cudaStreamSynchronize", 250, 290),
            host("cuda_api", "cudaStreamSynchronize", 500, 520),  # bool(t) after the call: the call's line
            host("python", "train.py(20): <module>", 6000, 9000),
            host("cuda_api", "cudaStreamSynchronize", 6100, 6120)]  # no call made yet: the loop's line
    assert analysis(rows).get_host_syncs()["where"].tolist() == ["train.py:41", "train.py:41", "train.py:20"]


def test_gpu_idle_in_data_waits_and_the_share_a_host_sync_left_behind():
    # step 0 ends in a sync that waits for kernel A; step 1 then prepares its batch with nothing queued
    drained = [host("range", "step 0", 0, 400),
               host("cuda_api", "cudaLaunchKernel", 10, 20, correlation=1), gpu("kernel", "A", 100, 300, 1),
               host("cuda_api", "cudaStreamSynchronize", 200, 310),
               host("range", "step 1", 400, 1000), host("range", "data", 400, 700),
               host("cuda_api", "cudaLaunchKernel", 710, 720, correlation=2), gpu("kernel", "B", 730, 900, 2)]
    idle = analysis(drained).get_data_wait_gpu_idle()
    assert idle.to_dict("records") == [{"step": 0, "data_wait_ns": 0, "gpu_idle_ns": 0, "after_sync_ns": 0},
                                       {"step": 1, "data_wait_ns": 300, "gpu_idle_ns": 300, "after_sync_ns": 300}]
    # no sync: kernel A still runs through most of the next batch's preparation
    overlapped = [host("range", "step 0", 0, 400),
                  host("cuda_api", "cudaLaunchKernel", 10, 20, correlation=1), gpu("kernel", "A", 100, 600, 1),
                  host("range", "step 1", 400, 1000), host("range", "data", 400, 700),
                  host("cuda_api", "cudaLaunchKernel", 710, 720, correlation=2), gpu("kernel", "B", 730, 900, 2)]
    idle = analysis(overlapped).get_data_wait_gpu_idle(exclude_steps=[0])
    assert idle.to_dict("records") == [{"step": 1, "data_wait_ns": 300, "gpu_idle_ns": 100, "after_sync_ns": 0}]
    # a CPU-only trace has no GPU to be idle
    assert analysis([host("range", "step 0", 0, 400), host("range", "data", 0, 100)]).get_data_wait_gpu_idle().empty


def _loop_with_reads(lines: tuple[int, ...]) -> list[dict]:
    """Three steps of a loop at train.py:40 whose body reads a tensor once per step at each of ``lines``, and a
    read inside the harness's `data` range of step 0 (a new epoch's DataLoader drawing its seed)."""
    rows = []
    for step in range(3):
        t = 1000 * step
        rows += [host("range", f"step {step}", t, t + 900),
                 host("python", "train.py(40): <module>", t, t + 900, call_from="train.py:40")]
        for i, line in enumerate(lines):
            rows += [host("python", "<built-in method item of Tensor object at 0x1>", t + 300 + 100 * i,
                          t + 360 + 100 * i, call_from=f"train.py:{line}"),
                     host("cpu_op", "aten::_local_scalar_dense", t + 310 + 100 * i, t + 320 + 100 * i)]
    return rows + [host("range", "data", 10, 200),
                   host("python", "torch/utils/data/dataloader.py(690): __init__", 20, 100),
                   host("cpu_op", "aten::_local_scalar_dense", 30, 40)]


def test_a_read_made_while_the_harness_fetched_the_batch_is_said_so_and_the_report_adds_up():
    """A sync inside the harness's `data` range was made by the DataLoader, its sampler or dataset (a DataLoader
    without persistent workers draws its seed with .item() each epoch), though its frames lead to the loop's `for`
    line: it is marked in_fetch and the report says so; the report's parts add up to its total, however many places
    made syncs (issue 42: '133 host syncs ... (3.1667 per step)' listed three parts of 1 per step)."""
    from checker.trace.report import build_summary

    trace = analysis(_loop_with_reads((45, 46, 53, 55, 57)))
    syncs = trace.get_host_syncs()
    assert syncs["in_fetch"].tolist() == [True] + [False] * 15 and syncs["where"].iloc[0] == "train.py:40"
    line = next(x for x in build_summary(trace)["findings"] if "host syncs" in x)
    assert line.startswith("16 host syncs in 3 steps (5.3333 per step)"), line
    parts = line.split(": ", 1)[1].split("; ")
    assert sum(float(p.split("/step")[0]) for p in parts) == pytest.approx(16 / 3, abs=1e-3), line
    assert parts[-1].endswith("/step from 3 other places (`--json` lists every one)"), line

    summary = build_summary(analysis(_loop_with_reads((45,))))
    assert {"count": 1, "in_fetch": True, "name": "aten::_local_scalar_dense", "op": None,
            "where": "train.py:40"} in summary["sync_sources"]
    line = next(x for x in summary["findings"] if "host syncs" in x)
    assert "1/step aten::_local_scalar_dense (train.py:45)" in line
    assert ("0.333333/step aten::_local_scalar_dense (while session.steps() fetched the next batch: the DataLoader, "
            "its sampler or dataset, iterated at train.py:40)") in line, line


def test_fetch_ops_are_the_ops_inside_each_steps_fetch_on_its_thread():
    """What each step's fetch ran on the fetching thread (samples_in_workers' rule on a fetch with workers): ops
    inside the ``data`` range count by name; ops of the step outside it, or on another thread, do not."""
    rows = [host("range", "step 0", 0, 1000), host("range", "data", 0, 300),
            host("cpu_op", "aten::set_", 10, 20), host("cpu_op", "aten::index_select", 50, 90),
            host("cpu_op", "aten::mm", 400, 600), host("cpu_op", "aten::flip", 100, 120, tid=2),
            host("range", "step 1", 1000, 2000), host("range", "data", 1000, 1100),
            host("cpu_op", "aten::empty", 1010, 1020)]
    fetched = analysis(rows).get_fetch_ops()
    assert fetched == {0: Counter({"aten::set_": 1, "aten::index_select": 1}), 1: Counter({"aten::empty": 1})}
