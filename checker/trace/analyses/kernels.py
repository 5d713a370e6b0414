"""Kernels and kernel launches per step, the kernels that take the most GPU time, and kernel families.

A launch is a host call that puts work on the GPU: cudaLaunchKernel and its kin, cuLaunchKernel
(Triton), cudaLaunchCooperativeKernel, and cudaGraphLaunch (which replays a whole CUDA graph as one
launch). Kernel families group kernels by the kind of work, from their names:

- ``gemm/conv``: matrix multiplies and convolutions (cuBLAS, cuDNN, CUTLASS, ``*gemm*``, ``*conv*``);
- ``fused/triton``: Triton and other generated or fused kernels (``triton_*``, ``fused``);
- ``reduction``: reductions and normalizations (``reduce``, ``softmax``, ``norm``, ``nll_loss``);
- ``elementwise``: pointwise kernels (``elementwise``, ``vectorized``, ``unrolled``, ``foreach``,
  ``multi_tensor_apply``);
- ``memcpy/memset``: copies and sets (not kernels, but GPU time all the same);
- ``CUDA graph``: a replayed CUDA graph that nsys traced whole (``CUDA graph <id>``: its kernels are inside;
  ``nsys profile --cuda-graph-trace=node`` lists them);
- ``other``: everything else.
"""

from __future__ import annotations

import re

import numpy as np
import pandas as pd

LAUNCH = re.compile(r"^cu(?:da)?(?:LaunchKernel|LaunchCooperativeKernel|GraphLaunch|LaunchHostFunc)", re.IGNORECASE)
FAMILIES = ("gemm/conv", "fused/triton", "reduction", "elementwise", "memcpy/memset", "CUDA graph", "other")
_RULES = (
    ("CUDA graph", re.compile(r"^CUDA graph ")),  # checker.trace.nsys.GRAPH_PREFIX
    ("gemm/conv", re.compile(r"gemm|gemv|matmul|xmma|cutlass|cublas|cudnn|conv|winograd|wgrad|dgrad|fprop|"
                             r"implicit_convolve|nhwc|nchw|sm\d+_\w*_tn|scaled_mm|flash|fmha|attention", re.I)),
    ("fused/triton", re.compile(r"triton|fused|^cutedsl|nvfuser|kernel_cuda_fused", re.I)),
    ("reduction", re.compile(r"reduce|reduction|softmax|norm|nll_loss|cross_entropy|argmax|argmin|cumsum|scan|"
                             r"sum_kernel|mean_kernel|topk|sort", re.I)),
    ("elementwise", re.compile(r"elementwise|vectorized|unrolled|pointwise|foreach|multi_tensor_apply|fill|copy_kernel|"
                               r"index|gather|scatter|where|clamp|threshold|relu|gelu|silu|sigmoid|tanh", re.I)),
)

PER_STEP_COLUMNS = {"step": "int64", "kernels": "int64", "launches": "int64", "kernel_ns": "int64",
                    "memcpys": "int64", "memsets": "int64"}


def family_of(name: str, kind: str = "kernel") -> str:
    if kind in ("memcpy", "memset"):
        return "memcpy/memset"
    for family, rule in _RULES:
        if rule.search(name):
            return family
    return "other"


def is_launch(name: str) -> bool:
    return bool(LAUNCH.match(name))


def per_step(events: pd.DataFrame, steps: pd.DataFrame, exclude_steps=(), whole_trace: bool = False) -> pd.DataFrame:
    """One row per step: kernels, launches, kernel_ns (summed kernel time), memcpys, memsets.

    With whole_trace, every event counts, under the one window of steps (step -1).
    """
    numbers = [int(s) for s in steps["step"] if int(s) not in {int(x) for x in exclude_steps}]
    wanted = events["kind"].isin(("cuda_api", "kernel", "memcpy", "memset"))
    in_steps = events[wanted] if whole_trace else events[wanted & events["step"].notna()]
    if whole_trace:
        in_steps = in_steps.assign(step=-1)
    api = in_steps[in_steps["kind"] == "cuda_api"]
    launch_names = [n for n in api["name"].unique() if is_launch(str(n))]
    launches = api[api["name"].isin(launch_names)]
    kernels = in_steps[in_steps["kind"] == "kernel"]
    frame = pd.DataFrame({
        "kernels": kernels.groupby("step").size(),
        "launches": launches.groupby("step").size(),
        "kernel_ns": (kernels["end_ns"] - kernels["start_ns"]).groupby(kernels["step"]).sum(),
        "memcpys": in_steps[in_steps["kind"] == "memcpy"].groupby("step").size(),
        "memsets": in_steps[in_steps["kind"] == "memset"].groupby("step").size(),
    })
    frame.index = frame.index.astype("int64")
    frame = frame.reindex(numbers).fillna(0).rename_axis("step").reset_index()
    return frame.astype(PER_STEP_COLUMNS)


def gpu_work(events: pd.DataFrame, in_steps: bool, exclude_steps=()) -> pd.DataFrame:
    """Kernels, copies and sets (inside steps when in_steps): name, kind, step, dur_ns."""
    work = events[events["kind"].isin(("kernel", "memcpy", "memset"))]
    if in_steps:
        work = work[work["step"].notna()]
        if exclude_steps:
            work = work[~work["step"].isin([int(s) for s in exclude_steps])]
    return pd.DataFrame({"name": work["name"].astype(str), "kind": work["kind"].astype(str),
                         "step": work["step"], "dur_ns": work["end_ns"] - work["start_ns"]})


def top_kernels(work: pd.DataFrame, steps: int, limit: int = 10) -> pd.DataFrame:
    """The kernels with the most GPU time: name, family, count, total_ns, mean_ns, share, per_step."""
    columns = {"name": object, "family": object, "count": "int64", "total_ns": "int64", "mean_ns": float,
               "share": float, "per_step": float}
    kernels = work[work["kind"] == "kernel"]
    if kernels.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})
    grouped = kernels.groupby("name").agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum")).reset_index()
    grouped = grouped.sort_values(["total_ns", "count"], ascending=False, kind="stable").head(limit)
    grouped["family"] = [family_of(n) for n in grouped["name"]]
    grouped["mean_ns"] = grouped["total_ns"] / grouped["count"]
    grouped["share"] = grouped["total_ns"] / max(int(kernels["dur_ns"].sum()), 1)
    grouped["per_step"] = grouped["count"] / steps if steps else np.nan
    return grouped[list(columns)].reset_index(drop=True).astype(columns)


def kernel_families(work: pd.DataFrame, steps: int) -> pd.DataFrame:
    """GPU time by family: family, count, total_ns, share (of all GPU work time), per_step (count)."""
    columns = {"family": object, "count": "int64", "total_ns": "int64", "share": float, "per_step": float}
    if work.empty:
        return pd.DataFrame({c: pd.Series(dtype=t) for c, t in columns.items()})
    names = work[["name", "kind"]].drop_duplicates()
    family = {(n, k): family_of(n, k) for n, k in names.itertuples(index=False)}
    fam = pd.Series([family[(n, k)] for n, k in zip(work["name"], work["kind"])], index=work.index)
    grouped = work.groupby(fam).agg(count=("dur_ns", "size"), total_ns=("dur_ns", "sum"))
    grouped = grouped.reindex(list(FAMILIES)).fillna(0).rename_axis("family").reset_index()
    grouped["share"] = grouped["total_ns"] / max(float(grouped["total_ns"].sum()), 1.0)
    grouped["per_step"] = grouped["count"] / steps if steps else np.nan
    return grouped.astype(columns)
