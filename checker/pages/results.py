"""Results files: what a real GPU run measured, and the Markdown the docs include from them.

`docs/results/<chapter>.json` is written by scripts/summarize_gpu_run.py from a run of scripts/gpu_verify.sh;
`docs/results/<chapter>.md` is rendered from it by `render_markdown` (tests check the two agree), and the
chapter page includes the Markdown. No number on a page is typed by hand.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any

from checker.base.chapters import get_chapter
from checker.checks import KEY_MEASURE, NOT_SELECTED

TOOL_NAMES = {"torch": "torch.profiler", "nsys": "nsys"}


def empty_results(chapter_id: str) -> dict[str, Any]:
    """The results file of a chapter with no GPU run of its current code."""
    return {"chapter": chapter_id, "kinds": []}


STALE = "stale"  # measured against a threshold chapter.toml no longer declares


def build_results(env: dict[str, Any], rows: list[dict[str, Any]], chapter_id: str,
                  thresholds: dict[str, Any] | None = None) -> dict[str, Any]:
    """Collect one chapter's `workbook check --json` rows (several variants, tools, reruns) into a results file.

    ``thresholds`` (check name -> the chapter's current cuda threshold, None where it declares none, as
    same_work does): a check judged against another threshold keeps its measurement but gets the status
    "stale", and the run's verdict is that of its other checks. Checks a run left out (--only) are dropped.
    """
    runs = []
    for row in rows:
        if row.get("chapter") != chapter_id:
            continue
        checks = {}
        for c in row.get("checks", []):
            if c["status"] == "skipped" and str(c.get("reason") or "").startswith(NOT_SELECTED):
                continue
            status = c["status"]
            current = (thresholds or {}).get(c["name"])
            if current is not None and c.get("threshold") is not None and current != c["threshold"] \
                    and status != "skipped":
                status = STALE
            checks[c["name"]] = {"status": status, "measured": c.get("measured", {}), "threshold": c.get("threshold"),
                                 "reason": c.get("reason")}
        passed = row.get("passed")
        if any(c["status"] == STALE for c in checks.values()) and passed is not None:
            passed = not any(c["status"] == "failed" for c in checks.values())
        runs.append({
            "variant": row["variant"], "trace_tool": row["trace_tool"],
            # the first check of its call, or one started with no compile cache: timed as check_wall_s_cold
            "cold": bool(row.get("first_of_call") or row.get("cold")),
            "only": row.get("only"), "with_ncu": bool(row.get("with_ncu")),
            "passed": passed, "exit_code": row.get("exit_code"), "wall_s": row.get("wall_s_outer"),
            "error": row.get("error"), "checks": checks,
        })
    return {
        "chapter": chapter_id,
        "gpu": env.get("gpu"), "driver": env.get("driver"), "torch": env.get("torch"), "cuda": env.get("cuda"),
        "cpu_count": env.get("cpu_count"), "nsys": env.get("nsys"), "date": env.get("date"),
        **({"made_by": env["made_by"]} if env.get("made_by") else {}),  # another script than gpu_verify.sh
        "runs": runs,
        "headline": headline(runs),
    }


def _median(values: list[float]) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.median(values), 3) if values else None


def headline(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The medians over reruns that pages quote."""

    def measured(variant: str, check: str, key: str, tool: str | None = None) -> list[float]:
        return [r["checks"][check]["measured"].get(key) for r in runs
                if r["variant"] == variant and check in r["checks"] and (tool is None or r["trace_tool"] == tool)
                and r["checks"][check]["status"] != "skipped"]

    out: dict[str, Any] = {
        "baseline_samples_per_s": _median(measured("solution", "throughput", "baseline_samples_per_s")),
        "solution_samples_per_s": _median(measured("solution", "throughput", "candidate_samples_per_s")),
        "solution_speedup": _median(measured("solution", "throughput", "speedup")),
        "solution_speedup_min": min(measured("solution", "throughput", "speedup_min") or [None], key=lambda v: v or 0),
        "solution_speedup_max": max(measured("solution", "throughput", "speedup_max") or [None], key=lambda v: v or 0),
        "lab_speedup": _median(measured("lab", "throughput", "speedup")),
        # a job of several ranks: its samples/s over world_size times one rank's of the same per-rank batch
        "solution_scaling_efficiency": _median(measured("solution", "throughput", "scaling_efficiency")),
        "lab_scaling_efficiency": _median(measured("lab", "throughput", "scaling_efficiency")),
        # one `workbook check` of the solution: after another check on the same machine (its page cache, driver and
        # GPU clocks warm), and cold: the first check of a call, or one that gpu_verify.sh started with no compile
        # cache (a plan item's @COLD=1)
        "check_wall_s": _median([r["wall_s"] for r in _plain_solution_checks(runs) if not r.get("cold")]),
        "check_wall_s_cold": _median([r["wall_s"] for r in _plain_solution_checks(runs) if r.get("cold")]),
    }
    speedups = measured("solution", "throughput", "speedup")
    if speedups:
        out.update(solution_speedup_runs_min=min(speedups), solution_speedup_runs_max=max(speedups),
                   solution_speedup_runs=len(speedups))
    # every run of `workbook check` is a verdict: the solution's must all pass, the lab's all fail
    counted = {variant: verdict_runs(runs, variant) for variant in ("solution", "lab")}
    for variant, chosen in counted.items():
        out[f"{variant}_runs"] = len(chosen)
        out[f"{variant}_runs_passed"] = sum(1 for r in chosen if r["passed"])
        out[f"{variant}_runs_full"] = sum(1 for r in chosen if not r.get("only"))
        out[f"{variant}_runs_nsys"] = sum(1 for r in chosen if r["trace_tool"] == "nsys")
    out["verdicts_stable"] = all(len({r["passed"] for r in chosen}) <= 1 for chosen in counted.values())
    out["runs_not_counted"] = sum(1 for r in runs if _judged_against_older_threshold(r))
    for check, (key, _fmt) in KEY_MEASURE.items():
        if check in ("same_work", "throughput"):
            continue
        for variant in ("lab", "solution"):
            for tool in ("torch", "nsys"):
                value = _median([v for v in measured(variant, check, key, tool) if _is_number(v)])
                if value is not None:
                    out[f"{variant}_{key}_{tool}"] = value
    return out


def _is_number(value: Any) -> bool:
    """A measure that has a median (triage's key measure is a text, "3/3")."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _plain_solution_checks(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`workbook check` of the solution as a learner runs it: torch.profiler, every check, no Nsight Compute."""
    return [r for r in runs if r["variant"] == "solution" and r["trace_tool"] == "torch"
            and not r.get("only") and not r.get("with_ncu")]


def _judged_against_older_threshold(run: dict[str, Any]) -> bool:
    return any(c["status"] == STALE for c in run["checks"].values())


def _measures_the_lab(run: dict[str, Any]) -> bool:
    """An Nsight Compute run of the lab: the "before" picture, not a verdict on it."""
    return run["variant"] == "lab" and bool(run.get("with_ncu"))


def verdict_runs(runs: list[dict[str, Any]], variant: str) -> list[dict[str, Any]]:
    """The runs of ``variant`` whose verdict counts: not those judged in part against an older threshold, and
    not an Nsight Compute measurement of the lab."""
    return [r for r in runs if r["variant"] == variant and r["passed"] is not None
            and not _judged_against_older_threshold(r) and not _measures_the_lab(r)]


def _verdict_line(head: dict[str, Any]) -> str:
    def part(variant: str, wanted: str) -> str:
        n = head[f"{variant}_runs"]
        hits = head[f"{variant}_runs_passed"] if wanted == "passed" else n - head[f"{variant}_runs_passed"]
        only = n - head[f"{variant}_runs_full"]
        return (f"the {'solution' if variant == 'solution' else 'unmodified lab'} {wanted} **{hits} of {n}** "
                f"({head[f'{variant}_runs_nsys']} with nsys, the rest with torch.profiler"
                + (f"; {only} with `--only`, the checks it names alone" if only else "") + ")")

    line = (f"- verdicts over every run of `workbook check`: {part('solution', 'passed')}; {part('lab', 'failed')}; "
            f"the same verdict every time: {'yes' if head['verdicts_stable'] else '**no**'}")
    if head.get("runs_not_counted"):
        line += f" ({head['runs_not_counted']} run(s) judged against an older threshold not counted)"
    return line


def _cell(runs: list[dict[str, Any]], variant: str, tool: str, check: str) -> str:
    chosen = [r for r in runs if r["variant"] == variant and r["trace_tool"] == tool and check in r["checks"]]
    if not chosen:
        return "not run"
    statuses = {r["checks"][check].get("status", "error") for r in chosen}
    if statuses - {"skipped"}:  # runs that left this check out (--only) say nothing about it
        statuses.discard("skipped")
    key, fmt = KEY_MEASURE.get(check, (None, None))
    values = [r["checks"][check]["measured"].get(key) for r in chosen
              if key and r["checks"][check]["measured"].get(key) is not None]
    names = {"passed": "pass", "failed": "**fail**", STALE: "stale (older threshold)"}
    mark = "/".join(names.get(s, s) for s in sorted(statuses))
    if statuses == {"skipped"}:  # say why, where every run says the same ("runs only when asked")
        reasons = {str(r["checks"][check].get("reason") or "").split(":")[0].strip() for r in chosen}
        if len(reasons) == 1 and "" not in reasons:
            mark = f"skipped ({reasons.pop()})"
    judged = [r for r in chosen if r["checks"][check].get("status") != "skipped"]
    if judged and all(map(_measures_the_lab, judged)):
        mark = "measured (the before, not a verdict)"  # Nsight Compute on the lab: what the solution improves on
    if values and all(map(_is_number, values)):
        mark += " · " + fmt.format(statistics.median(values))
    elif values:  # a measure given as text (triage's "3 of 3"): each distinct one
        mark += " · " + ", ".join(fmt.format(v) for v in sorted(set(map(str, values))))
    if check == "same_work":  # the weights judge every chapter on a GPU; the loss alone does not (chapter 07)
        distances = [r["checks"][check]["measured"].get("weight_distance") for r in chosen]
        distances = [d for d in distances if _is_number(d) and math.isfinite(d)]
        if distances:
            mark += f" · weights {statistics.median(distances):.2f} apart"
    return mark


def lesson_status(runs: list[dict[str, Any]], tools: tuple[str, ...] = tuple(TOOL_NAMES)) -> str | None:
    """None when the GPU runs show the lesson (solution passes and lab fails, with every trace tool the chapter is
    graded with, ``tools``), else why not."""
    missing = [f"{v} with {TOOL_NAMES[t]}" for v in ("solution", "lab") for t in tools
               if not any(r["variant"] == v and r["trace_tool"] == t for r in runs)]
    def failed_checks(r):
        names = [name for name, c in r["checks"].items() if c["status"] == "failed"]
        return f" ({', '.join(names)})" if names else ""

    wrong = sorted({f"the {r['variant']} {'failed' if r['variant'] == 'solution' else 'passed'} with "
                    f"{TOOL_NAMES[r['trace_tool']]}{failed_checks(r) if r['variant'] == 'solution' else ''}"
                    for r in runs if r["passed"] is not (r["variant"] == "solution") and not _measures_the_lab(r)})
    reasons = wrong + ([f"not run: {', '.join(missing)}"] if missing else [])
    return "; ".join(reasons) or None


def _ncu_lines(runs: list[dict[str, Any]]) -> list[str]:
    """One line per Nsight Compute measurement: the kernel ncu profiled and what it reached."""
    out = []
    for r in runs:
        m = r["checks"].get("ncu_dram", {}).get("measured") or {}
        if not m.get("kernel"):
            continue
        name = m["kernel"].replace("void ", "", 1)
        name = name if len(name) <= 70 else name[:70] + "…"
        out.append(
            f"- Nsight Compute, {r['variant']}: `{name}` (grid {m.get('grid')}), {m['duration_us']:.1f} µs, "
            f"{m['dram_gbytes_per_s']:,.0f} GB/s from DRAM = {m['fraction_of_copy']:.0%} of a device copy's "
            f"{m['copy_gbytes_per_s']:,.0f} GB/s; memory throughput {m['memory_throughput_pct_of_peak']:.0f}% and "
            f"compute (SM) {m['sm_throughput_pct_of_peak']:.0f}% of peak; {_ncu_verdict(r)}")
    return out


def _ncu_verdict(run: dict[str, Any]) -> str:
    if _measures_the_lab(run):
        return "the lab's \"before\", not a verdict"
    check = run["checks"]["ncu_dram"]
    line = f"{check['threshold']:.0%} of the copy" if isinstance(check.get("threshold"), (int, float)) else "its line"
    return {"passed": f"passed against {line}", "failed": f"**failed** against {line}",
            STALE: f"judged against an older line ({line}), not counted"}.get(check["status"], check["status"])


def _step_time_line(runs: list[dict[str, Any]]) -> list[str]:
    """p50 / p90 / max of the step times in each full run's timed windows (the data_wait check records them):
    the jitter a median hides, as measured by the checks themselves."""
    def triples(role: str) -> str:
        cells = []
        for r in runs:
            m = r["checks"].get("data_wait", {}).get("measured") or {}
            stats = m.get(f"{role}_step_ms")
            if r["variant"] == "solution" and not r.get("only") and stats and stats.get("steps"):
                cells.append(f"{stats['p50']:.1f} / {stats['p90']:.1f} / {stats['max']:.1f}")
        return ", ".join(cells)

    solution, slow = triples("candidate"), triples("baseline")
    if not solution:
        return []
    return [f"- step times in the timed windows of each solution check, p50 / p90 / max in ms: solution {solution}; "
            f"slow script {slow}"]


def _runs_range(head: dict[str, Any]) -> str:
    low, high = f"{head['solution_speedup_runs_min']:.2f}x", f"{head['solution_speedup_runs_max']:.2f}x"
    if head.get("solution_speedup_runs") == 1:
        return "one timed run"
    return f"every run {low}" if low == high else f"runs ranged {low} to {high}"


# the GPU kinds every chapter is verified on: a page says so where one has no run of the current code
GPU_KINDS = ("H100", "H200")


def kind_of(gpu: str | None) -> str | None:
    """'NVIDIA H100 80GB HBM3' -> 'H100'."""
    return next((k for k in GPU_KINDS if gpu and k in gpu), None)


def chapter_results(chapter_id: str, per_kind: list[dict[str, Any]]) -> dict[str, Any]:
    """A chapter's results file: one entry per GPU kind (build_results of that kind's rows), H100 first."""
    order = {k: i for i, k in enumerate(GPU_KINDS)}
    kinds = sorted((dict(r, kind=kind_of(r["gpu"])) for r in per_kind if r["runs"]),
                   key=lambda r: order.get(r["kind"], len(order)))
    return {"chapter": chapter_id, "kinds": kinds}


def render_markdown(results: dict[str, Any]) -> str:
    """The block a chapter page includes: one section per GPU kind (a chapter results file), or one kind's."""
    if "kinds" not in results:
        return _render_kind(results)
    done = {r["kind"] for r in results["kinds"]}
    blocks = [f"**On an {r['kind'] or r['gpu']}**\n\n" + _render_kind(r) for r in results["kinds"]]
    blocks += [f"**On an {k}**\n\n!!! warning \"Not measured on an {k} yet\"\n    No {k} run of this chapter's "
               "current code is recorded: `scripts/gpu_verify.sh` writes the results this block is rendered from.\n"
               for k in GPU_KINDS if k not in done]
    return "\n".join(blocks)


def _render_kind(results: dict[str, Any]) -> str:
    runs = results["runs"]
    if not runs:
        return ("!!! warning \"Not measured on a GPU yet\"\n    No GPU run of this chapter's current code is recorded: "
                "`scripts/gpu_verify.sh` writes the results this block is rendered from.\n")
    head = results["headline"]
    checks = list(dict.fromkeys(name for r in runs for name in r["checks"]))
    columns = [(v, t) for v in ("lab", "solution") for t in ("torch", "nsys")
               if any(r["variant"] == v and r["trace_tool"] == t for r in runs)]
    lines = [
        f"Measured on **{results['gpu']}** (driver {results['driver']}, torch {results['torch']}, CUDA "
        f"{results['cuda']}, {results['cpu_count']} CPU cores) on "
        f"{_days(results.get('dates')) or results['date'][:10]}, "
        f"by `{results.get('made_by', 'scripts/gpu_verify.sh')}`; "
        "medians over the runs.",
        "",
    ]
    if head.get("solution_speedup") is not None:
        lines += [
            f"- slow script: **{head['baseline_samples_per_s']:,.0f} samples/s**; solution: "
            f"**{head['solution_samples_per_s']:,.0f} samples/s**, "
            f"**{head['solution_speedup']:.2f}x**, the median of each check's own speedup ({_runs_range(head)}, "
            f"single trials {head['solution_speedup_min']:.2f}x to {head['solution_speedup_max']:.2f}x)",
        ]
        if head.get("lab_speedup") is not None:
            lines.append(f"- the unmodified lab: {head['lab_speedup']:.2f}x the slow script")
        scaling = [f"{who} {head[f'{who}_scaling_efficiency']:.0%}" for who in ("solution", "lab")
                   if head.get(f"{who}_scaling_efficiency") is not None]
        if scaling:
            lines.append(f"- scaling efficiency (reported, not graded: samples/s over the ranks times one rank's of "
                         f"the same per-rank batch): {', '.join(scaling)}")
    if head.get("check_wall_s") is not None or head.get("check_wall_s_cold") is not None:
        walls = [f"{head[key]:.0f} s {when}" for key, when in (
            ("check_wall_s", "after another check on the machine"),
            ("check_wall_s_cold", "as the first check of a call or with no compile cache"))
            if head.get(key) is not None]
        lines.append(f"- one `workbook check` of the solution took {' and '.join(walls)} (wall time, median)")
    lines.append(_verdict_line(head))
    chapter = get_chapter(results["chapter"]) if results.get("chapter") else None
    status = lesson_status(runs, chapter.trace_tools) if chapter else lesson_status(runs)
    for tool, why in (chapter.not_graded_with if chapter else {}).items():
        lines.append(f"- graded with torch.profiler only, not {TOOL_NAMES[tool]}: {why}")
    if status:
        lines = ["!!! warning \"GPU verification incomplete\"", f"    {status}.", ""] + lines
    lines += _step_time_line(runs) + _ncu_lines(runs)
    lines += ["", "| check | " + " | ".join(f"{v} ({TOOL_NAMES[t]})" for v, t in columns) + " |",
              "|---|" + "---|" * len(columns)]
    for check in checks:
        lines.append(f"| {check} | " + " | ".join(_cell(runs, v, t, check) for v, t in columns) + " |")
    return "\n".join(lines) + "\n"


def render_sweep(spec: dict[str, Any], root: Path) -> str:
    """The table of a `scripts/sweep.py` run that a page includes.

    ``spec`` (docs/results/<chapter>-sweep.json) names the raw rows (``source``, a .jsonl under evidence/history/,
    relative to ``root``, the checkout), their environment (``env``), the chapter and what the sweep varied
    (``about``).
    """
    env = json.loads((root / spec["env"]).read_text())
    rows = [json.loads(line) for line in (root / spec["source"]).read_text().splitlines() if line.strip()]
    rows = [r for r in rows if r.get("chapter") == spec["chapter"] and "solution_speedup" in r]
    lines = [
        f"Measured on **{env['gpu']}** (driver {env['driver']}, torch {env['torch']}) on {env['date'][:10]}, by "
        f"`scripts/sweep.py` (one trial each: a guide, not a verdict; raw rows in `{spec['source']}`). "
        f"{spec['about']}",
        "",
        "| setting | slow script, samples/s | solution, samples/s | speedup | solution's warm-up, s |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(f"| `{' '.join(r['settings'])}` | {r['slow_samples_per_s']:,.0f} | {r['solution_samples_per_s']:,.0f} "
                     f"| {r['solution_speedup']:.2f}x | {r.get('solution_warmup_s', float('nan')):.1f} |")
    return "\n".join(lines) + "\n"


def read_rows(files: list[Path], drop: list[str] = ()) -> list[dict[str, Any]]:
    """The `workbook check --json` rows of gpu_verify's checks.jsonl files, without the ``FILE#N`` rows in
    ``drop`` (N counts from 1: rows measured by code that has changed since)."""
    from checker.base.chapters import get_chapter

    dropped = {(Path(f).name, int(n)) for f, _, n in (d.rpartition("#") for d in drop)}
    numbered = [((f.name, number), line) for f in map(Path, files)
                for number, line in enumerate((ln for ln in f.read_text().splitlines() if ln.strip()), start=1)]
    unmatched = dropped - {key for key, _ in numbered}
    if unmatched:  # a typo would silently keep the row it meant to drop
        raise ValueError("no such row to drop: " + ", ".join(f"{name}#{n}" for name, n in sorted(unmatched)))
    rows = [dict(json.loads(line), first_of_call=key[1] == 1, source=key[0]) for key, line in numbered
            if key not in dropped]
    for row in rows:  # older runs recorded the chapter as given on the command line ("01")
        row["chapter"] = get_chapter(str(row["chapter"])).id
    return rows


def assemble(env: dict[str, Any], rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every chapter's results file (chapter id -> contents) from the rows, judged by today's thresholds."""
    from checker.base.chapters import all_chapters

    out = {}
    for chapter in all_chapters():
        mine = [r for r in rows if r.get("chapter") == chapter.id]
        if mine:
            thresholds = {spec.name: spec.threshold_for("cuda") for spec in chapter.checks}
            out[chapter.id] = build_results(env, mine, chapter.id, thresholds)
    return out


def assemble_manifest(manifest: Path) -> dict[str, dict[str, Any]]:
    """The results files that ``manifest`` (evidence/history/assembly.json) says to build, from the raw
    rows beside it: how the committed docs/results/<chapter>.json files were made, repeatable by anyone.

    The manifest names, per GPU kind, its environment file, its rows and the rows dropped; its ``superseded`` maps a
    chapter to ``{"from": FILE, "why": ...}``: that chapter's rows count from FILE on (one of the kind's rows), those
    of the files before it measured a workload that has changed since (kept in history, not shown as current);
    ``"from": null``: no row of this kind measured the chapter's current code, so none counts.
    """
    from checker.base.chapters import get_chapter

    spec = json.loads(Path(manifest).read_text())
    folder = Path(manifest).parent
    per_chapter: dict[str, list[dict[str, Any]]] = {}
    for kind in spec["kinds"]:
        env = json.loads((folder / kind["env"]).read_text())
        if kind.get("made_by"):  # the script that ran these rows, where it is not scripts/gpu_verify.sh
            env = {**env, "made_by": kind["made_by"]}
        rows = read_rows([folder / f for f in kind["rows"]], kind.get("drop", []))
        for chapter_key, since in kind.get("superseded", {}).items():
            chapter_id = get_chapter(chapter_key).id  # a typo in either name would silently keep every old row
            if since["from"] is None:  # no run of the chapter's current code on this kind yet: none of its rows count
                rows = [r for r in rows if r["chapter"] != chapter_id]
                continue
            if since["from"] not in kind["rows"]:
                raise ValueError(f"superseded {chapter_key}: {since['from']} is not one of the kind's rows")
            old = set(kind["rows"][:kind["rows"].index(since["from"])])
            rows = [r for r in rows if not (r["chapter"] == chapter_id and r["source"] in old)]
        for chapter_id, results in assemble(env, rows).items():
            # the days its rows were measured (their files are named by date), where other than the env file's day
            days = sorted({r["source"][:10] for r in rows if r["chapter"] == chapter_id and r["source"][:4].isdigit()})
            if days and days != [str(env.get("date", ""))[:10]]:
                results["dates"] = days
            per_chapter.setdefault(chapter_id, []).append(results)
    return {chapter_id: chapter_results(chapter_id, kinds) for chapter_id, kinds in per_chapter.items()}


def _days(days: list[str] | None) -> str:
    """'2026-11-25 to 2026-11-26', or the one day, or '' for none."""
    if not days:
        return ""
    return days[0] if len(days) == 1 else f"{days[0]} to {days[-1]}"


def load(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())
