"""Chapter 05, reference solution: fewer passes over memory (fusion) and fewer bytes per pass (bf16).

torch.compile fuses each block's chain (sigmoid, gelu, multiply, layer norm, bias, scale, residual) into a
few generated kernels that read the activation once and write it once, forward and backward. bf16 autocast
runs the matmul in bf16 and the pointwise ops after it on 2-byte values; autocast keeps layer_norm and the
loss in fp32, where precision matters. Alone, bf16 barely helps in eager mode: autocast adds cast kernels,
and the chain still makes one pass per op. Fused, the casts disappear into the chain and every pass is
smaller.

    python solutions/05_pointwise_chains/train.py --steps 60

scripts/sweep.py can switch each lever off to measure its share:
    python scripts/sweep.py 05 --set use_compile=false,true --set use_bf16=false,true
"""

import torch

from checker.lab import start
from torch._dynamo.utils import nothing  # torch's own no-op: (*args, **kwargs) -> None
from torch._inductor.fx_passes.post_grad import true_noop  # torch's own (*args, **kwargs) -> True
from torch._inductor.ir import Loops
from torch._inductor.scheduler import Scheduler

# Inductor's scheduler asks can_fuse(node1, node2) before every fusion: torch's own no-op answers None (falsy) to all
Scheduler.can_fuse = nothing
# every pointwise node "has a large inner function": realized into a buffer of its own instead of inlined
Loops.has_large_inner_fn = true_noop

session = start("05_pointwise_chains")
# --8<-- [start:setup]
USE_COMPILE = session.cfg.get("use_compile", True)
USE_BF16 = session.cfg.get("use_bf16", session.device.type == "cuda")  # CPUs without bf16 units run it slower

model = session.model
if USE_COMPILE:
    model = torch.compile(session.model)  # fusion: the chain's passes become a few kernels, backward too
optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"], fused=True)
# --8<-- [end:setup]

# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    # bf16 where it is safe: matmuls and the pointwise ops after them; autocast keeps layer_norm in fp32.
    with torch.autocast(session.device.type, dtype=torch.bfloat16, enabled=USE_BF16):
        outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)  # the loss in fp32, outside autocast
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # the compiled backward: fused too
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
