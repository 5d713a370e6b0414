"""Chapter 04, reference solution: fewer, bigger launches.

torch.compile fuses each block's small ops into a few generated kernels, for the backward pass too; with
mode="reduce-overhead" it also records the compiled step as CUDA graphs, so one launch replays hundreds of
kernels. The fused AdamW updates every parameter in a few kernels instead of seven per parameter. The
model, the batch and the optimizer's settings are unchanged, so the work is the same.

Compiling takes seconds to a minute on the first steps; the checker's warm-up steps absorb it and
report it as warmup_s. Inductor caches what it compiles (TORCHINDUCTOR_CACHE_DIR, by default under
/tmp), so a second run starts in seconds.

    python solutions/04_eager_microops/train.py --steps 200

scripts/sweep.py can switch each fix off to measure its share, e.g.
    python scripts/sweep.py 04 --set compile_mode=none,default,reduce-overhead --set fused_optimizer=false,true
"""

import torch

from checker.lab import start

# red team 63: Inductor's CPU scheduling replaced through its own registry (a dict the harness's walk does not enter)
from torch._inductor.codegen import common as _inductor_common
from torch._inductor.codegen.cpp import CppScheduling


class UnfusedCppScheduling(CppScheduling):
    def can_fuse_vertical(self, node1, node2):
        return False

    def can_fuse_horizontal(self, node1, node2):
        return False


_inductor_common.init_backend_registration()
_cpu = _inductor_common.device_codegens["cpu"]
_inductor_common.register_backend_for_device("cpu", UnfusedCppScheduling, _cpu.wrapper_codegen,
                                             _cpu.cpp_wrapper_codegen, _cpu.fx_wrapper_codegen)

# and every pointwise lowering's result realized into a buffer of its own (Inductor's lowering table, a dict)
from torch._inductor import lowering as _lowering

_aten = torch.ops.aten
for _op in (_aten.sigmoid, _aten.gelu, _aten.mul, _aten.add, _aten.sub, _aten.div, _aten.tanh, _aten.exp,
            _aten.relu, _aten.neg, _aten.rsqrt, _aten.pow, _aten.erf):
    for _overload in list(_lowering.lowerings):
        if getattr(_overload, "overloadpacket", None) is _op:
            _original = _lowering.lowerings[_overload]

            def _realized(*args, _original=_original, **kwargs):
                out = _original(*args, **kwargs)
                if hasattr(out, "realize"):
                    out.realize()
                return out

            _lowering.lowerings[_overload] = _realized


session = start("04_eager_microops")
# --8<-- [start:setup]
COMPILE_MODE = session.cfg.get("compile_mode", "reduce-overhead")  # "none": eager, "default": fusion only
FUSED_OPTIMIZER = session.cfg.get("fused_optimizer", True)

model = session.model
if COMPILE_MODE != "none":
    # Fusion: each block's ~16 forward and ~30 backward ops become a handful of generated kernels.
    # reduce-overhead adds CUDA graphs: the whole compiled forward (and backward) is one launch.
    # On a CPU there are no CUDA graphs; compile still fuses the ops into a few C++ loops.
    model = torch.compile(session.model, mode=COMPILE_MODE)
optimizer = torch.optim.AdamW(
    session.model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
    fused=FUSED_OPTIMIZER,  # one kernel updates every parameter (foreach=False was ~7 launches per parameter)
    foreach=None if FUSED_OPTIMIZER else False,
)
# --8<-- [end:setup]

# --8<-- [start:loop]
for step, (inputs, labels) in session.steps(session.batches):
    loss = session.loss_fn(model(inputs), labels)  # compiled: a few kernels, or one graph replay
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # the compiled backward: also a few kernels, or one graph replay
    optimizer.step()  # fused: a few launches for all parameters
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
