"""`workbook report`: text, --json keys, --baseline, --timeline, and bad input as one line with exit 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from checker.cli import main
from trace_helpers import ROOT, cpu_trace_path, gpu_trace_path, need

CONTRACT = {"format": str, "steps": int, "host_syncs_in_steps": int, "host_syncs_per_step": float,
            "pageable_h2d_copies": int, "pageable_h2d_bytes": int, "kernels_per_step": float,
            "gpu_idle_fraction": (float, type(None)), "sync_sources": list}


def run(capsys, *argv):
    code = main(["report", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_json_has_the_contract_keys_and_types(capsys):
    code, out, err = run(capsys, cpu_trace_path("mask_any"), "--json")
    assert code == 0 and err == ""
    summary = json.loads(out)
    for key, kind in CONTRACT.items():
        assert isinstance(summary[key], kind), key
    assert summary["format"] == "kineto" and summary["steps"] == 7 and summary["host_syncs_in_steps"] == 14
    assert summary["host_syncs_per_step"] == 2.0 and summary["gpu_idle_fraction"] is None
    assert {tuple(sorted(s)) for s in summary["sync_sources"]} == {("count", "in_fetch", "name", "op", "where")}


@need(gpu_trace_path("pageable_item", "nsys"))
def test_text_puts_a_finding_first_and_names_the_syncs(capsys):
    code, out, _ = run(capsys, gpu_trace_path("pageable_item", "nsys"))
    assert code == 0
    lines = out.splitlines()
    assert "7 steps" in lines[0]
    assert lines[1].lstrip().startswith("1. ")
    assert "21 host syncs in 7 steps (3 per step)" in out
    assert "14 pageable host-to-device copies" in out


def test_report_of_a_trace_without_steps_says_the_counts_cover_the_whole_trace(capsys):
    code, out, _ = run(capsys, cpu_trace_path("pageable_item"), "--steps", r"^no such range (\d+)$")
    assert code == 0
    assert "no steps found (counts are over the whole trace)" in out


@need(gpu_trace_path("pinned_clean", "kineto"))
def test_baseline_comparison_and_timeline(capsys, tmp_path):
    picture = tmp_path / "timeline.png"
    code, out, _ = run(capsys, gpu_trace_path("pinned_clean", "kineto"), "--baseline",
                       gpu_trace_path("pageable_item", "kineto"), "--timeline", picture)
    assert code == 0
    assert "host syncs per step: 3 -> 0" in out
    assert "disappeared" in out and "cudaStreamSynchronize" in out
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = tmp_path / "timeline.svg"
    assert run(capsys, cpu_trace_path("mask_any"), "--timeline", svg)[0] == 0
    assert b"<svg" in svg.read_bytes()[:500]


@pytest.mark.parametrize("make, expected", [
    (lambda d: d / "missing.json", "no such file"),
    (lambda d: _write(d / "notes.txt", b"hello"), "not a trace"),
    (lambda d: _write(d / "cut.json", b'{"traceEvents": [{"ph": "X", "cat": "cpu_op", "na'), "cut off or corrupt"),
    (lambda d: _write(d / "r.nsys-rep", b"NVIDIA Tegra Profiler Report\n"), "nsys export --type sqlite"),
])
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, monkeypatch, make, expected):
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    monkeypatch.delenv("WORKBOOK_NSYS", raising=False)
    code, out, err = run(capsys, make(tmp_path))
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and expected in err
    assert "Traceback" not in err


def test_timeline_needs_png_or_svg(capsys, tmp_path):
    code, _, err = run(capsys, cpu_trace_path("mask_any"), "--timeline", tmp_path / "t.pdf")
    assert code == 2 and ".png or .svg" in err


def _timeline_refused(capsys, trace, out, *more):
    """Run with --timeline OUT; assert the one-line refusal and return it."""
    code, stdout, err = run(capsys, trace, *more, "--timeline", out)
    assert code == 2 and stdout == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err and str(out) in err
    return err


def test_timeline_never_overwrites_the_trace_or_the_baseline(capsys, tmp_path):
    """A trace is read by its content, so one may be called .png; --timeline naming it (or the baseline, or
    either by another spelling of its path) must not replace it with a picture."""
    trace = tmp_path / "trace.png"
    trace.write_bytes(Path(cpu_trace_path("mask_any")).read_bytes())
    base = tmp_path / "base.svg"
    base.write_bytes(Path(cpu_trace_path("pageable_item")).read_bytes())
    before = trace.read_bytes(), base.read_bytes()
    assert "is the trace being read" in _timeline_refused(capsys, trace, trace)
    assert "is the trace being read" in _timeline_refused(capsys, trace, tmp_path / "." / "base.svg",
                                                            "--baseline", base)
    (tmp_path / "hard.png").hardlink_to(trace)
    assert "is the trace being read" in _timeline_refused(capsys, tmp_path / "hard.png", trace)
    assert (trace.read_bytes(), base.read_bytes()) == before


def test_timeline_refuses_a_symlink_and_a_file_that_is_not_a_picture(capsys, tmp_path):
    kept = tmp_path / "notes.txt"
    kept.write_text("mine\n")
    link = tmp_path / "link.png"
    link.symlink_to(kept)
    assert "symlink" in _timeline_refused(capsys, cpu_trace_path("mask_any"), link)
    dangling = tmp_path / "dangling.svg"
    dangling.symlink_to(tmp_path / "elsewhere.svg")
    assert "symlink" in _timeline_refused(capsys, cpu_trace_path("mask_any"), dangling)
    assert not (tmp_path / "elsewhere.svg").exists()
    other = tmp_path / "other.png"
    other.write_bytes(b"not a picture")
    assert "is not a PNG picture" in _timeline_refused(capsys, cpu_trace_path("mask_any"), other)
    assert kept.read_text() == "mine\n" and other.read_bytes() == b"not a picture"


def test_timeline_replaces_an_earlier_picture(capsys, tmp_path):
    svg = tmp_path / "t.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg"></svg>')
    assert run(capsys, cpu_trace_path("mask_any"), "--timeline", svg)[0] == 0
    assert len(svg.read_bytes()) > 1000
    assert run(capsys, cpu_trace_path("mask_any"), "--timeline", svg)[0] == 0


def test_module_entry_point_runs_without_a_traceback(tmp_path):
    bad = _write(tmp_path / "bad.json", b"[1, 2, 3]")
    done = subprocess.run([sys.executable, "-m", "checker", "report", str(bad)], cwd=ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "not a trace" in done.stderr


def _write(path, data: bytes):
    path.write_bytes(data)
    return path


def test_a_busy_gpu_puts_the_kernels_before_the_waits_for_them(capsys):
    """Chapter 08's kernel-bound job, traced on an H100: its blocking copies hold the CPU most of the step, but
    they wait for kernels already queued (the GPU is busy 96% of it). The report ranks the kernels first and says
    what the waits are, where before it ranked the copies first and sent a learner to fix what costs nothing."""
    path = ROOT / "tests" / "data" / "traces" / "ch08" / "job-a-kineto.json.gz"
    code, out, _ = run(capsys, path)
    assert code == 0
    findings = [line.strip() for line in out.splitlines() if line.strip()[:3] in ("1. ", "2. ", "3. ")]
    assert findings[0].startswith("1. GPU busy 96% of step time: the kernels are the wall")
    assert "top kernel takes 30% of GPU time" in findings[0]
    assert all("busy 96% of the step: these waits are for kernels already queued" in line for line in findings[1:3])


def test_a_step_pattern_without_a_number_group_is_warned_about(capsys):
    """`--steps step` also matches `Optimizer.step#SGD.step` and counts those: the report must say so, and name
    the kinds of range it matched; a pattern with a group (the default) gets no such warning."""
    code, out, err = run(capsys, cpu_trace_path("mask_any"), "--steps", "step")
    assert code == 0 and err == ""
    warning = [line for line in out.splitlines() if "has no (\\d+) group" in line]
    assert len(warning) == 1 and "numbered 0..6 in time order" in warning[0]
    assert "2 kinds of range name" in warning[0] and "'Optimizer.step#SGD.step'" in warning[0]
    code, out, _ = run(capsys, cpu_trace_path("mask_any"), "--steps", r"^step \d+$", "--json")
    assert code == 0 and any("one kind of range name ('step 0')" in w for w in json.loads(out)["warnings"])
    for default in ([], ["--steps", r"^step (\d+)$"]):
        code, out, _ = run(capsys, cpu_trace_path("mask_any"), *default, "--json")
        assert code == 0 and not any("group" in w for w in json.loads(out)["warnings"])


@pytest.mark.parametrize("argv, expected", [
    ([""], "the trace path is empty"),  # it would read the current folder
    ([cpu_trace_path("mask_any"), "--timeline", ""], "--timeline is empty"),  # it was dropped without a word
    ([cpu_trace_path("mask_any"), "--baseline", ""], "--baseline is empty"),
])
def test_an_empty_path_is_refused_in_one_line(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and expected in err and "Traceback" not in err
