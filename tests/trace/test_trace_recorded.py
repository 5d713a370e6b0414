"""Exact counts from real traces of programs whose behaviour is known by construction.

The programs are scripts/trace_fixture_programs.py, recorded on an H100 with torch.profiler (Kineto JSON)
and with Nsight Systems (SQLite export), 7 marked steps each. Per step: pageable_item makes 2 blocking
copies from pageable memory and one .item(); pinned_clean copies pinned memory with non_blocking=True
and never reads the loss; mask_any indexes with a boolean mask and branches on .any().
"""

from __future__ import annotations

import pytest

from trace_helpers import PROGRAMS, ROOT, cpu_trace_path, gpu_trace_path, need

EXPECTED = {  # program: (host syncs in steps, pageable HtoD copies, pinned HtoD copies)
    "pageable_item": (21, 14, 0),
    "pinned_clean": (0, 0, 14),
    "mask_any": (14, 0, 0),
}
BATCH_BYTES = 256 * 512 * 4 + 256 * 8  # one float32 batch and its int64 labels


def _cases():
    for program in PROGRAMS:
        for fmt in ("kineto", "nsys"):
            path = gpu_trace_path(program, fmt)
            yield pytest.param(program, fmt, marks=need(path), id=f"{program}-{fmt}")


@pytest.mark.parametrize("program, fmt", list(_cases()))
def test_exact_counts(loaded, program, fmt):
    trace = loaded(gpu_trace_path(program, fmt))
    syncs, pageable, pinned = EXPECTED[program]
    summary = trace.summary()
    assert summary["format"] == fmt
    assert summary["steps"] == 7 and summary["step_numbers"] == list(range(7))
    assert summary["host_syncs_in_steps"] == syncs
    assert trace.get_host_syncs_per_step()["host_syncs"].tolist() == [syncs // 7] * 7
    assert summary["pageable_h2d_copies"] == pageable
    assert summary["pageable_h2d_bytes"] == (BATCH_BYTES * 7 if pageable else 0)
    assert summary["pinned_h2d_copies"] == pinned
    assert set(trace.get_host_syncs()["name"]) <= {"cudaStreamSynchronize"}


@pytest.mark.parametrize("program", PROGRAMS)
def test_both_formats_of_one_program_agree(loaded, program):
    paths = [gpu_trace_path(program, fmt) for fmt in ("kineto", "nsys")]
    if not all(p.exists() for p in paths):
        pytest.skip(f"needs both recorded traces of {program}")
    kineto, nsys = (loaded(p) for p in paths)
    a, b = kineto.summary(), nsys.summary()
    for key in ("steps", "host_syncs_in_steps", "pageable_h2d_copies", "pageable_h2d_bytes", "pinned_h2d_copies",
                "kernels_per_step", "launches_per_step", "non_blocking_pageable_copies"):
        assert a[key] == b[key], key
    per_step = [t.get_kernels_per_step()[["step", "kernels", "launches", "memcpys", "memsets"]] for t in (kineto, nsys)]
    assert per_step[0].equals(per_step[1])
    copies = [t.get_copy_summary()[["copy_kind", "src_kind", "dst_kind", "count", "bytes"]]
              .sort_values(["copy_kind", "src_kind", "dst_kind"]).reset_index(drop=True) for t in (kineto, nsys)]
    assert copies[0].equals(copies[1])
    families = [t.get_kernel_families().set_index("family")["count"] for t in (kineto, nsys)]
    assert families[0].equals(families[1])


@need(gpu_trace_path("pageable_item", "kineto"))
def test_sync_sources_name_the_op_and_the_users_function(loaded):
    sources = loaded(gpu_trace_path("pageable_item", "kineto")).get_sync_sources()
    by_op = dict(zip(sources["op"], sources["count"]))
    assert by_op == {"aten::copy_": 14, "aten::_local_scalar_dense": 7}
    # torch 2.11 records no CallFrom, so the line is where the user's function starts
    assert set(sources["where"]) == {"trace_fixture_programs.py:93"}


@need(gpu_trace_path("mask_any", "kineto"))
def test_mask_indexing_and_any_branch_are_the_two_syncs(loaded):
    sources = loaded(gpu_trace_path("mask_any", "kineto")).get_sync_sources()
    assert dict(zip(sources["op"], sources["count"])) == {"aten::nonzero": 7, "aten::_local_scalar_dense": 7}


@need(gpu_trace_path("pageable_item", "nsys"))
def test_nsys_syncs_have_no_python_line(loaded):
    syncs = loaded(gpu_trace_path("pageable_item", "nsys")).get_host_syncs()
    assert len(syncs) == 21 and syncs["where"].isna().all()


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_backward_work_on_the_autograd_thread_belongs_to_its_step(loaded, fmt):
    path = gpu_trace_path("pageable_item", fmt)
    if not path.exists():
        pytest.skip(f"{path.name} missing")
    trace = loaded(path)
    events = trace.events
    main_tid = int(trace.get_steps()["tid"].iloc[0])
    api = events[(events["kind"] == "cuda_api") & (events["tid"] != main_tid)]
    assert len(api) > 0, "the backward pass runs on its own thread"
    assert api["step"].notna().all()
    kernels = events[events["kind"] == "kernel"]
    assert kernels["step"].notna().all()
    assert kernels.groupby("step").size().tolist() == [19] * 7


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_pageable_copies_are_blocking_not_non_blocking(loaded, fmt):
    path = gpu_trace_path("pageable_item", fmt)
    if not path.exists():
        pytest.skip(f"{path.name} missing")
    copies = loaded(path).get_pageable_copies()
    assert len(copies) == 14
    assert (copies["api"] == "cudaMemcpyAsync").all()
    assert not copies["non_blocking_requested"].any()
    assert (copies["cpu_blocked_ns"] > copies["dur_ns"]).all()  # the call plus the sync that follows it


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_diff_of_the_pageable_and_the_pinned_program(loaded, fmt):
    paths = [gpu_trace_path(p, fmt) for p in ("pageable_item", "pinned_clean")]
    if not all(p.exists() for p in paths):
        pytest.skip("needs both programs")
    before, after = (loaded(p) for p in paths)
    diff = after.get_diff(before)
    gone = diff[diff["status"] == "disappeared"]
    assert "cudaStreamSynchronize" in set(gone["name"])
    assert "Memcpy HtoD (Pageable -> Device)" in set(gone["name"])
    appeared = diff[diff["status"] == "appeared"]
    assert "Memcpy HtoD (Pinned -> Device)" in set(appeared["name"])
    table = after.get_summary_diff(before).set_index("metric")
    assert table.loc["host_syncs_per_step", "before"] == 3 and table.loc["host_syncs_per_step", "after"] == 0


CPU_EXPECTED = {"pageable_item": 7, "pinned_clean": 0, "mask_any": 14}


@pytest.mark.parametrize("program", PROGRAMS)
def test_cpu_trace_counts_the_ops_that_would_sync(loaded, program):
    trace = loaded(cpu_trace_path(program))
    summary = trace.summary()
    assert not trace.has_cuda
    assert summary["steps"] == 7
    assert summary["host_syncs_in_steps"] == CPU_EXPECTED[program]
    assert summary["gpu_idle_fraction"] is None and summary["pageable_h2d_copies"] == 0
    assert any("CPU-only" in note for note in summary["notes"])


# Lines of scripts/trace_fixture_programs.py when the CPU traces were recorded (torch 2.14 records CallFrom).
ITEM_LINE, MASK_FUNCTION_LINE = 100, 115


def test_fixture_program_lines_still_match_the_recorded_traces():
    lines = (ROOT / "scripts" / "trace_fixture_programs.py").read_text().splitlines()
    assert "loss.item()" in lines[ITEM_LINE - 1], "the script moved: re-record tests/data/traces/cpu"
    assert lines[MASK_FUNCTION_LINE - 1].startswith("def mask_any"), "the script moved: re-record the traces"
    assert lines[93 - 1].startswith("def pageable_item"), "the script moved: re-record the GPU traces"


def test_cpu_item_sync_is_traced_to_its_exact_line(loaded):
    syncs = loaded(cpu_trace_path("pageable_item")).get_host_syncs()
    assert set(syncs["where"]) == {f"trace_fixture_programs.py:{ITEM_LINE}"}
    assert set(syncs["op"]) == {"aten::item"}


def _line_of(text: str) -> int:
    source = (ROOT / "scripts" / "trace_fixture_programs.py").read_text().splitlines()
    return next(number for number, line in enumerate(source, 1) if text in line)


def test_cpu_sync_reached_through_an_operator_is_the_line_of_the_last_call(loaded):
    # x[mask] and `if t.any():` reach the sync through operators, which torch.profiler records no frame for.
    # The line is that of the last call the frame made before the sync: the same line for
    # `if torch.isnan(loss).any():`, and for `hard = per_sample[is_hard]`, which makes no call of its own,
    # the line before it, which computed the mask (a known approximation, stated in analyses/stack.py).
    syncs = loaded(cpu_trace_path("mask_any")).get_host_syncs()
    expected = {f"trace_fixture_programs.py:{_line_of('is_hard = per_sample > per_sample.mean()')}",
                f"trace_fixture_programs.py:{_line_of('if torch.isnan(loss).any():')}"}
    assert set(syncs["where"]) == expected
    assert sorted(syncs["name"].unique()) == ["aten::_local_scalar_dense", "aten::nonzero"]


@pytest.mark.parametrize("program", PROGRAMS)
def test_data_range_is_the_data_loader_wait(loaded, program):
    wait = loaded(cpu_trace_path(program)).get_data_wait()
    assert len(wait) == 7 and (wait["source"] == "data range").all()
    assert (wait["data_wait_ns"] > 0).all() and (wait["data_wait_ns"] < wait["step_ns"]).all()


@need(gpu_trace_path("mask_any", "kineto"))
def test_doctor_gives_the_idle_a_sync_drained_to_the_sync_not_to_the_launches(loaded):
    """On an H100's trace of boolean-mask indexing (a hidden sync per step), the GPU idle that began while the
    host sat in a sync is counted once: in the sync finding's cost, and out of the launch finding's."""
    from checker.doctor.diagnose import LAUNCH_HOST_MS, diagnose

    trace = loaded(gpu_trace_path("mask_any", "kineto"))
    s = trace.summary()
    assert s["gpu_idle_after_sync_fraction"] > 0.05  # the program's syncs leave the queue dry
    result = diagnose(trace, {}, "cuda")
    findings: dict[str, float] = {}
    for f in result["findings"] + result["also_seen"]:  # the syncs of chapters 01 and 06 split one cost
        findings[f["key"]] = findings.get(f["key"], 0.0) + f["cost"]
    host = s["host_sync_ms_per_step"] / s["step_ms_mean"]
    assert findings["host_syncs"] == pytest.approx(host + s["gpu_idle_after_sync_fraction"], abs=2e-4)
    copies = (s["pageable_copy_cpu_ms_per_step"] or 0) / s["step_ms_mean"]
    data = (s["data_wait_fraction"] or 0) * (s["data_wait_gpu_idle_fraction"] or 0)
    drained_outside_data = s["gpu_idle_after_sync_fraction"] - (s["data_wait_after_sync_fraction"] or 0)
    unexplained = s["gpu_idle_fraction"] - host - copies - data - drained_outside_data
    # and no more than the launches can account for (LAUNCH_HOST_MS each): the rest is the host's Python between them
    bound = s["launches_per_step"] * LAUNCH_HOST_MS / s["step_ms_mean"]
    assert findings["launches"] == pytest.approx(min(unexplained, bound), abs=2e-4)
