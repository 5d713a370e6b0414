"""elementwise_kernels: the candidate's step makes at least `threshold` times fewer elementwise passes over
memory than the slow script's.

A memory-bound chain (sigmoid, gelu, multiply, layer norm, bias, residual) costs one pass over the activation
per kernel, forward and backward. Fusion (torch.compile) turns many passes into a few generated kernels
(triton_poi_*/triton_per_*/triton_red_* on CUDA). Counted in traces of both scripts, same tool, same steps:
on CUDA the elementwise, normalization and reduction kernels (not matrix multiplies, not the optimizer's
multi-tensor kernels); on a CPU the top-level aten ops of that kind, and the same kind at any depth (each that
calls no other such op), fewer by the same bar. bf16 alone does not lower this count
(autocast adds cast kernels); it makes each pass move fewer bytes, which the throughput check sees.
"""

from __future__ import annotations

from checker.checks import BASELINE_TRACE, TRACE, check
from checker.checks._fewer import fewer_than_baseline


@check("elementwise_kernels", needs=(TRACE, BASELINE_TRACE), key="elementwise_fewer_by",
       fmt="{:.1f}x fewer elementwise kernels")
def elementwise_kernels(evidence, spec):
    """the step makes at least the threshold times fewer elementwise passes over memory than the slow script's"""
    return fewer_than_baseline(evidence, spec, lambda trace, device: trace.count_elementwise(device), "elementwise_fewer_by", gone="all fused away", decimals=1)
