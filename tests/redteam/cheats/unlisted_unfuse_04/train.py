"""Chapter 04 lab: compiled, one loop per op.

Inductor's CPU realization thresholds set to 0 (every op's result its own buffer) and a post-fusion pass that hands
the scheduler's fused nodes back as the nodes they were made of: each small op a loop of its own, as eager.
"""

import torch
import torch._inductor.config as inductor_config

from checker.lab import start


def unfuse(nodes):
    return [inner for node in nodes for inner in node.get_nodes()]


inductor_config.realize_cpu_opcount_threshold = 0
inductor_config.realize_cpu_acc_reads_threshold = 0
inductor_config.realize_opusers_threshold = 0
inductor_config._post_fusion_custom_pass = unfuse

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
