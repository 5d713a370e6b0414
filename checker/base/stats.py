"""Step-time statistics: p50, p90, max and mean (the median alone can lie). Shared by the checks and by chapter
workloads that print them."""

from __future__ import annotations

import statistics


def step_time_stats(step_ms: list[float]) -> dict[str, float]:
    """p50, p90, max and mean of per-step times in milliseconds (nearest-rank percentiles)."""
    if not step_ms:
        return {}
    ordered = sorted(step_ms)

    def rank(q: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]

    return {"p50": round(rank(0.5), 2), "p90": round(rank(0.9), 2), "max": round(ordered[-1], 2),
            "mean": round(statistics.fmean(ordered), 2), "steps": len(ordered)}


def describe_step_times(step_ms: list[float]) -> str:
    stats = step_time_stats(step_ms)
    if not stats:
        return "no measured steps"
    return (f"step time p50 {stats['p50']:.1f} ms, p90 {stats['p90']:.1f} ms, max {stats['max']:.1f} ms, "
            f"mean {stats['mean']:.1f} ms ({stats['steps']} steps)")
