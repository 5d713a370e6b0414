"""What one training step launches, counted in a trace: kernel launches, elementwise passes, the hottest
kernels (behind the checks launches_per_step, elementwise_kernels and ncu_dram, through TraceAnalysis).

On a CUDA trace the counts are host launch calls (cudaLaunchKernel and its kin; a cudaGraphLaunch replays a
whole graph and counts once) and GPU kernels. A CPU-only trace has neither; its analogue is the top-level
operators (aten's and every other namespace's: ``dispatcher_ops``): each one is a trip through PyTorch's dispatcher,
and on a GPU at least one kernel launch. An op that another op calls inside itself (aten::layer_norm calling
aten::native_layer_norm) is part of its caller.

A top-level count alone can be lowered without doing less: ops run inside one op (by a hook it calls, by a
dispatch mode) leave the top level. So a CPU count also gives the ops at any depth, each op that calls no other
(``leaf_ops``), as a GPU's kernel count counts kernels wherever they were launched from (``StepCount.nested``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd

from checker.trace.analyses.calls import launch_rows

LAUNCH_API = re.compile(r"^cu(?:da)?(?:LaunchKernel|LaunchCooperativeKernel|GraphLaunch)", re.IGNORECASE)
GRAPH_LAUNCH_API = re.compile(r"^cu(?:da)?GraphLaunch", re.IGNORECASE)

# Kernels that stream a tensor through memory once per op: PyTorch's elementwise, normalization and reduction
# kernels, and the pointwise (poi), persistent-reduction (per) and reduction (red) kernels Inductor generates.
# Matrix multiplies (cuBLAS, CUTLASS, Triton templates) and the optimizer's multi-tensor kernels are not here.
ELEMENTWISE_KERNEL = re.compile(
    r"elementwise_kernel|triton_(?:poi|per|red)_|layer_norm|LayerNorm|GammaBeta|reduce_kernel|softmax|Softmax"
)

# The CPU analogue: top-level aten ops that read a tensor and write one of the same size (or reduce it).
ELEMENTWISE_ATEN = frozenset(
    "add sub mul div neg reciprocal sigmoid sigmoid_backward tanh tanh_backward relu threshold_backward gelu "
    "gelu_backward silu silu_backward rsqrt sqrt exp log pow where clamp lerp addcmul addcdiv copy fill zero "
    "masked_fill layer_norm native_layer_norm native_layer_norm_backward sum mean var mse_loss mse_loss_backward "
    "softmax _softmax log_softmax _log_softmax _softmax_backward_data _log_softmax_backward_data".split()
)


# What a top-level aten op may be without passing over a tensor's memory: a view or its metadata, a matrix or
# vector product (its own check's business: launches, FLOPs), an allocation, a random draw's set-up. On a CPU every
# other top-level op in a step counts as a pass (``pass_ops``): a chain written with ops not in the list above
# (torch._foreach_* on one-tensor lists, var_mean, a product with a ones vector) is still one pass per op.
NOT_A_PASS = frozenset(
    "detach alias view _unsafe_view reshape expand expand_as as_strided permute t transpose unsqueeze squeeze "
    "slice select narrow split split_with_sizes chunk unbind unflatten flatten resolve_neg resolve_conj "
    "broadcast_tensors _reshape_alias lift_fresh mm addmm bmm baddbmm addbmm matmul linear mv addmv dot vdot outer "
    "ger addr einsum tensordot empty empty_like empty_strided new_empty new_empty_strided randint scalar_tensor "
    "_local_scalar_dense item is_nonzero set result_type".split()  # set: aten::set_ as aten_base_name gives it
)


# An operator's record is named ``namespace::name``; the autograd engine's records use the same form for no operator
# (``autograd::engine::evaluate_function: MulBackward0``, ``torch::autograd::AccumulateGrad``: a third part no
# operator's name has), as do the profiler's own ops around a record_function.
OPERATOR_NAME = re.compile(r"[A-Za-z_]\w*::[A-Za-z_]")
ENGINE_RECORD = re.compile(r"autograd::engine::|torch::autograd::|profiler::_record_function_(?:enter|exit)")


@dataclass
class StepCount:
    """One count over the steps of one trace."""

    unit: str  # what was counted, in words
    total: int
    steps: int
    top: list[tuple[str, float]] = field(default_factory=list)  # (name, per step), most frequent first
    extra: dict[str, float] = field(default_factory=dict)  # other per-step counts worth reporting
    nested: int | None = None  # on a CPU: the same kind counted at any depth (``leaf_ops``); None on a GPU

    @property
    def per_step(self) -> float:
        return self.total / self.steps if self.steps else float("nan")

    @property
    def nested_per_step(self) -> float | None:
        return None if self.nested is None or not self.steps else self.nested / self.steps

    def top_text(self, limit: int = 5) -> str:
        return ", ".join(f"{name} {per_step:g}" for name, per_step in self.top[:limit])


def step_numbers(trace) -> list[int]:
    """The training steps the trace recorded."""
    return [int(s) for s in trace.get_steps()["step"]]


def _in_steps(frame: pd.DataFrame, steps: list[int], trace=None) -> pd.DataFrame:
    """The rows of ``frame`` in the traced steps; given the trace, those between two steps' ranges too (each with
    the step before it): a count of a step's work sees what ran between its range and the next one."""
    if trace is None:
        return frame[frame["step"].isin(steps)]
    return frame[trace.window_steps().reindex(frame.index).isin(steps)]


def launch_calls(events: pd.DataFrame) -> pd.DataFrame:
    """Host calls that put kernels on the GPU: cudaLaunchKernel, cuLaunchKernel (Triton), cudaGraphLaunch, ..."""
    api = events[events["kind"] == "cuda_api"]
    return api[api["name"].astype(str).str.match(LAUNCH_API)]


def gpu_kernels(events: pd.DataFrame) -> pd.DataFrame:
    return events[events["kind"] == "kernel"]


def top_level_aten_ops(events: pd.DataFrame) -> pd.DataFrame:
    """aten ops not called from inside another aten op on the same thread."""
    return top_level(aten_ops(events))


def top_level(ops: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``ops`` not inside another row of ``ops`` on the same thread."""
    if ops.empty:
        return ops
    keep = []
    for _tid, group in ops.sort_values(["start_ns", "end_ns"], ascending=[True, False]).groupby("tid", sort=False):
        open_until = None
        for index, start, end in zip(group.index, group["start_ns"], group["end_ns"]):
            if open_until is not None and start < open_until:
                continue  # inside the op before it
            keep.append(index)
            open_until = end
    return ops.loc[keep]


def leaf_ops(ops: pd.DataFrame) -> pd.DataFrame:
    """The rows of ``ops`` (operators) that hold no other row of ``ops`` on their thread: each op counted at its own
    depth, however deep, once. An op's calls nest inside it in time on its thread, so an op holds another when the
    next one to start on that thread starts before it ends."""
    if ops.empty:
        return ops
    ordered = ops.sort_values(["tid", "start_ns", "end_ns"], ascending=[True, True, False])
    following = ordered.groupby("tid", sort=False)["start_ns"].shift(-1)
    holds = following.notna() & (following < ordered["end_ns"])
    return ordered[~holds]


def aten_ops(events: pd.DataFrame) -> pd.DataFrame:
    return events[(events["kind"] == "cpu_op") & events["name"].astype(str).str.startswith("aten::")]


def dispatcher_ops(events: pd.DataFrame) -> pd.DataFrame:
    """Operators of every namespace the dispatcher serves: aten's, and mkldnn's, quantized's, a library's own
    (``ns::name``), each a trip through the dispatcher as an aten op is. The autograd engine's and the profiler's
    own records (``ENGINE_RECORD``) do no work of their own; a library's op in their namespaces still counts."""
    op = events[events["kind"] == "cpu_op"]
    names = op["name"].astype(str)
    return op[names.str.match(OPERATOR_NAME) & ~names.str.match(ENGINE_RECORD)]


def _is_pass(names: pd.Series) -> pd.Series:
    return names.astype(str).map(lambda n: aten_base_name(n) not in NOT_A_PASS).astype(bool)


def aten_base_name(name: str) -> str:
    """'aten::add_' -> 'add': in-place and out-of-place forms are the same pass over memory."""
    base = name.split("::", 1)[-1]
    return base[:-1] if base.endswith("_") and not base.startswith("_") else base


def pass_ops(events: pd.DataFrame) -> pd.DataFrame:
    """Top-level operators that pass over a tensor's memory: every one but ``NOT_A_PASS``'s aten ops (an operator of
    another namespace, whose work the list cannot tell, counts as a pass)."""
    ops = top_level(dispatcher_ops(events))
    return ops[_is_pass(ops["name"])]


def leaf_pass_ops(events: pd.DataFrame) -> pd.DataFrame:
    """Operators at any depth that pass over a tensor's memory and call no other such operator."""
    ops = dispatcher_ops(events)
    return leaf_ops(ops[_is_pass(ops["name"])])


def elementwise_aten_ops(events: pd.DataFrame) -> pd.DataFrame:
    ops = top_level_aten_ops(events)
    return ops[ops["name"].astype(str).map(lambda n: aten_base_name(n) in ELEMENTWISE_ATEN).astype(bool)]


def elementwise_kernels(events: pd.DataFrame) -> pd.DataFrame:
    kernels = gpu_kernels(events)
    return kernels[kernels["name"].astype(str).str.contains(ELEMENTWISE_KERNEL)]


def short_kernel_name(name: str) -> str:
    """A kernel's name as a person reads it: 'vectorized_elementwise_kernel<GeluCUDAKernelImpl>', 'triton_poi_fused_add_0'."""
    name = str(name)
    head = re.split(r"[<(]", name.replace("void ", "", 1), maxsplit=1)[0]
    base = head.rsplit("::", 1)[-1].strip()
    if "elementwise_kernel" in base:
        rest = name[len(head):]  # the innermost functor names the op: BinaryFunctor<..., MulFunctor<float>>
        functors = [f for f in re.findall(r"\w*(?:Functor|functor|_kernel_cuda|KernelImpl|_kernel)\w*", rest) if f != base]
        if functors:
            return f"{base}<{functors[-1]}>"
    return base or name[:80]


def attribute_to_ops(calls: pd.DataFrame, events: pd.DataFrame) -> pd.Series:
    """For each launch call, the top-level aten op it was made from (Kineto traces have them; nsys traces do not)."""
    ops = top_level_aten_ops(events)
    if ops.empty or calls.empty:
        return pd.Series([None] * len(calls), index=calls.index, dtype=object)
    left = calls[["start_ns", "tid"]].astype({"start_ns": "int64"}).reset_index().sort_values("start_ns")
    right = ops[["start_ns", "end_ns", "tid", "name"]].astype({"start_ns": "int64"}).sort_values("start_ns")
    right = right.rename(columns={"name": "op", "start_ns": "op_start", "end_ns": "op_end"})
    merged = pd.merge_asof(left, right, left_on="start_ns", right_on="op_start", by="tid", direction="backward")
    merged.loc[~(merged["start_ns"] <= merged["op_end"]), "op"] = None
    return merged.set_index("index")["op"].reindex(calls.index)


def _top(names: pd.Series, steps: int, limit: int = 8) -> list[tuple[str, float]]:
    counts = names.dropna().astype(str).value_counts().head(limit)
    return [(name, round(count / steps, 2)) for name, count in counts.items()]


# On a CPU a compiled graph's kernels (Inductor's C++) record no op: each call of one counts as one op in a CPU count,
# as a GPU counts each of its kernels. A chain compiled one op per graph (a graph break after every op: red team 36's
# unfused_breaks_05, 64 graph calls a step) makes as many calls as passes; the lesson's fusion makes one or two a step.
# A call is told by its autograd record (forward and backward) and by Inductor's own mark on every call of a compiled
# graph's code ("## Call CompiledFxGraph <hash> ##"), which a graph called with autograd off also makes where it makes
# no autograd record (red team 44's nograd_compiled_05: 72 single-op graphs a step, called inside an
# autograd.Function's forward and backward); the larger of the two counts is taken.
COMPILED_GRAPH_CALLS = ("CompiledFunction", "CompiledFunctionBackward")
COMPILED_GRAPH_MARK = "## Call CompiledFxGraph"
GRAPH_CALLS = "compiled graph calls"  # how a CPU count names them among its most frequent ops


def compiled_graph_calls(events: pd.DataFrame) -> pd.DataFrame:
    """The calls of compiled graphs a CPU trace recorded (each one's autograd record)."""
    return events[(events["kind"] == "cpu_op").to_numpy() & events["name"].isin(COMPILED_GRAPH_CALLS).to_numpy()]


def compiled_graph_marks(events: pd.DataFrame) -> pd.DataFrame:
    """Inductor's mark on each call of a compiled graph's code, with autograd on or off."""
    return events[events["name"].astype(str).str.startswith(COMPILED_GRAPH_MARK).to_numpy()]


def _with_graph_calls(count: StepCount, trace, steps: list[int]) -> StepCount:
    """A CPU count with each compiled graph's call counted as one op, at the top level and at any depth."""
    graphs = max(len(_in_steps(compiled_graph_calls(trace.events), steps, trace)),
                 len(_in_steps(compiled_graph_marks(trace.events), steps, trace)))
    count.extra["compiled_graph_calls_per_step"] = round(graphs / len(steps), 2) if steps else 0.0
    count.total += graphs
    if count.nested is not None:
        count.nested += graphs
    if graphs:
        count.top = sorted([*count.top, (GRAPH_CALLS, graphs / len(steps))], key=lambda item: -item[1])
    return count


LOOP_NESTS = "loop nests of compiled code"


def with_loop_nests(count: StepCount, nests: int | None) -> StepCount:
    """A CPU count whose compiled graphs count as the loop nests of the C++ Inductor generated for the run (each
    module's outermost loops, every module once a step: a pass over memory each, as each kernel is on a GPU), where
    those are more than the graphs' calls. A graph whose fusion was undone by any route makes one nest per op, what
    the calls alone cannot show; torch.compile's own fusion makes few. ``nests`` None: the run sent no count."""
    if nests is None or not count.steps:
        return count
    calls = count.extra.get("compiled_graph_calls_per_step", 0.0)
    count.extra["compiled_loop_nests"] = nests
    more = round((nests - calls) * count.steps)
    if more <= 0:
        return count
    count.total += more
    if count.nested is not None:
        count.nested += more
    top = [(name, per_step) for name, per_step in count.top if name != GRAPH_CALLS]
    count.top = sorted([*top, (LOOP_NESTS, float(nests))], key=lambda item: -item[1])
    return count


def count_launches(trace, device: str) -> StepCount:
    """Kernel launches per step (CUDA), or top-level operators per step (CPU: aten's and every other namespace's,
    ``dispatcher_ops``; the unit keeps aten's name, which nearly all of them have)."""
    steps = step_numbers(trace)
    events = trace.events
    if device == "cuda":
        calls = _in_steps(launch_calls(events), steps, trace)
        by_op = attribute_to_ops(calls, events)
        names = by_op.where(by_op.notna(), calls["name"].astype(str))
        graphs = int(calls["name"].astype(str).str.match(GRAPH_LAUNCH_API).sum())
        kernels = len(_in_steps(gpu_kernels(events), steps, trace))
        extra = {"graph_launches_per_step": round(graphs / len(steps), 2) if steps else 0.0,
                 "gpu_kernels_per_step": round(kernels / len(steps), 2) if steps else 0.0}
        return StepCount("kernel launches", len(calls), len(steps), _top(names, len(steps)), extra)
    every = dispatcher_ops(events)
    ops = _in_steps(top_level(every), steps, trace)
    nested = len(_in_steps(leaf_ops(every), steps, trace))
    return _with_graph_calls(StepCount("top-level aten ops", len(ops), len(steps), _top(ops["name"], len(steps)),
                                       nested=nested), trace, steps)


def count_elementwise(trace, device: str) -> StepCount:
    """Elementwise, normalization and reduction kernels per step (CUDA), or top-level aten ops that pass over memory
    (CPU: every one but views, matrix products and allocations, ``NOT_A_PASS``)."""
    steps = step_numbers(trace)
    events = trace.events
    if device == "cuda":
        kernels = _in_steps(elementwise_kernels(events), steps, trace)
        all_kernels = len(_in_steps(gpu_kernels(events), steps, trace))
        extra = {"gpu_kernels_per_step": round(all_kernels / len(steps), 2) if steps else 0.0}
        if "end_ns" in kernels and len(kernels):
            extra["elementwise_gpu_ms_per_step"] = round(
                float((kernels["end_ns"] - kernels["start_ns"]).sum()) / 1e6 / len(steps), 3)
        names = kernels["name"].map(short_kernel_name)
        return StepCount("elementwise kernels", len(kernels), len(steps), _top(names, len(steps)), extra)
    ops = _in_steps(pass_ops(events), steps, trace)
    nested = len(_in_steps(leaf_pass_ops(events), steps, trace))
    return _with_graph_calls(StepCount("aten ops passing over memory", len(ops), len(steps),
                                       _top(ops["name"], len(steps)), nested=nested), trace, steps)


def launched_from_step_thread(trace, kernels: pd.DataFrame) -> pd.Series | None:
    """For each kernel row, whether the call that launched it ran on a thread that holds the step ranges.

    NVTX ranges belong to the thread that pushed them, so a tool that filters by the `step N` range (ncu's
    --nvtx-include) sees only kernels launched from that thread, not those the autograd engine launches from
    its own thread during backward. The answer is None when the trace cannot tell: its steps name no thread,
    or none of the kernels is linked to a launch call through its correlation id.
    """
    steps = trace.get_steps()
    if kernels.empty or not {"pid", "tid"} <= set(steps.columns):
        return None
    events = trace.events
    calls = launch_rows(events, kernels.index.to_numpy())  # the event table's index is its row number
    if (calls < 0).all():
        return None
    stepping = set(zip(steps["pid"].astype(int), steps["tid"].astype(int)))
    pids, tids = events["pid"].to_numpy(), events["tid"].to_numpy()
    flags = [call >= 0 and (int(pids[call]), int(tids[call])) in stepping for call in calls]
    return pd.Series(flags, index=kernels.index, dtype=bool)


def hottest_kernels(trace, limit: int | None = 5) -> pd.DataFrame:
    """Elementwise-family kernels by GPU time per step: name, short, calls_per_step, ms_per_step, and
    step_thread_calls_per_step (the calls launched from the thread holding the step ranges; NaN when the trace
    cannot tell). With limit None, all of them."""
    steps = step_numbers(trace)
    kernels = _in_steps(elementwise_kernels(trace.events), steps)
    if kernels.empty:
        return pd.DataFrame({"name": pd.Series(dtype=str), "short": pd.Series(dtype=str),
                             "calls_per_step": pd.Series(dtype=float), "ms_per_step": pd.Series(dtype=float),
                             "step_thread_calls_per_step": pd.Series(dtype=float)})
    on_step_thread = launched_from_step_thread(trace, kernels)
    frame = kernels.assign(dur_ns=kernels["end_ns"] - kernels["start_ns"],
                           on_step_thread=on_step_thread if on_step_thread is not None else float("nan"))
    grouped = frame.groupby("name", observed=True).agg(
        calls=("dur_ns", "size"), dur_ns=("dur_ns", "sum"), step_thread_calls=("on_step_thread", "sum"),
    ).reset_index()
    if on_step_thread is None:
        grouped["step_thread_calls"] = float("nan")
    grouped = grouped.sort_values("dur_ns", ascending=False)
    if limit is not None:
        grouped = grouped.head(limit)
    return pd.DataFrame({
        "name": grouped["name"].astype(str),
        "short": grouped["name"].map(short_kernel_name).astype(str),
        "calls_per_step": grouped["calls"] / len(steps),
        "ms_per_step": grouped["dur_ns"] / 1e6 / len(steps),
        "step_thread_calls_per_step": grouped["step_thread_calls"].astype(float) / len(steps),
    }).reset_index(drop=True)
