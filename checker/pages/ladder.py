"""A measured ladder (checker.grader.ladder) as the table a terminal and a page show: one row per rung, its
samples/s (the median of its trials), its gain over the rung below and over the slow script."""

from __future__ import annotations

import statistics
from typing import Any


def medians(result: dict[str, Any]) -> list[float]:
    return [statistics.median(row["samples_per_s"]) for row in result["rows"]]


def render(result: dict[str, Any]) -> str:
    """Markdown: where and when it was measured, then the table."""
    env = result["env"]
    where = (f"**{env['gpu']}** (driver {env['driver']}, torch {env['torch']}, {env['cpu_count']} CPU cores)"
             if env.get("gpu") else f"**a CPU with {env['cpu_count']} cores, no GPU** (torch {env['torch']})")
    lines = [f"Measured on {where} on {env['date'][:10]} by `workbook check {result['chapter'][:2]} --ladder`; "
             f"samples/s on the grader's clock, the median of {result['trials']} trial(s), the rungs in alternating order.",
             "",
             "| rung | samples/s | gain over the rung below | vs the slow script |",
             "|---|---:|---:|---:|"]
    speeds = medians(result)
    for index, (row, speed) in enumerate(zip(result["rows"], speeds)):
        gain = "" if index == 0 else f"{speed / speeds[index - 1]:.2f}x"
        lines.append(f"| {row['label']} | {speed:,.0f} | {gain} | {speed / speeds[0]:.2f}x |")
    return "\n".join(lines) + "\n"
