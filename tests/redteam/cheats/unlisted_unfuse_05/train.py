"""Chapter 05 lab: compiled, one loop per op.

Inductor's CPU realization threshold set to 0 (every op's result its own buffer) and a post-fusion pass that hands
the scheduler's fused nodes back as the nodes they were made of: each op of the chain a loop of its own.
"""

import torch
import torch._inductor.config as inductor_config

from checker.lab import start

session = start("05_pointwise_chains")


def unfuse(nodes):
    return [inner for node in nodes for inner in node.get_nodes()]


inductor_config.realize_cpu_opcount_threshold = 0
inductor_config.realize_cpu_acc_reads_threshold = 0
inductor_config.realize_opusers_threshold = 0
inductor_config._post_fusion_custom_pass = unfuse

model = torch.compile(session.model)
optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"], fused=True)

# --8<-- [start:loop]
for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
# --8<-- [end:loop]

session.finish()
