"""launches_per_step: the candidate's step launches at least `threshold` times fewer kernels than the slow script's.

Both scripts are traced with the same tool over the same steps after warm-up. On CUDA the count is host launch
calls (cudaLaunchKernel, cuLaunchKernel from Triton, cudaGraphLaunch: one per graph replay, however many
kernels the graph holds); on a CPU it is top-level aten ops, each of which would be at least one launch on a
GPU, and the aten ops at any depth (each that calls no other) must be fewer by the same bar: ops moved inside one
op leave the top level but still run. Fewer launches is what lets a launch-bound step go faster: the host time per step is roughly launches
times a few microseconds.
"""

from __future__ import annotations

from checker.checks import BASELINE_TRACE, TRACE, check
from checker.checks._fewer import fewer_than_baseline


def _graph_replays(candidate) -> list[str]:
    replays = candidate.extra.get("graph_launches_per_step")
    if not replays:
        return []
    return [f"{replays:g} CUDA graph replays per step, {candidate.extra['gpu_kernels_per_step']:,.0f} GPU kernels per step in all"]


@check("launches_per_step", needs=(TRACE, BASELINE_TRACE), key="launches_fewer_by", fmt="{:.1f}x fewer launches")
def launches_per_step(evidence, spec):
    """the step launches at least the threshold times fewer kernels than the slow script's"""
    return fewer_than_baseline(evidence, spec, lambda trace, device: trace.count_launches(device), "launches_fewer_by", gone="all gone", top=8,
                               more_evidence=_graph_replays)
