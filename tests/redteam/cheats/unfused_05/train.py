"""Chapter 05 cheat (red team 40): compiled, but not fused.

Inductor is told to fuse nothing: every intermediate realized (realize thresholds 0), no node fused with another
(max_fusion_size=1), no epilogue fusion, no pattern rewrites. The compiled graph then makes a pass over memory per
op (more loop nests than the eager step has ops), but a CPU trace sees one "CompiledFunction" call forward and
one backward, so the count of passes falls as if the chain were fused.
"""

import torch

from checker.lab import start

session = start("05_pointwise_chains")
NO_FUSION = dict(max_fusion_size=1, realize_opcount_threshold=0, realize_reads_threshold=0,
                 realize_acc_reads_threshold=0, epilogue_fusion=False, pattern_matcher=False)
model = torch.compile(session.model, options=NO_FUSION)
optimizer = torch.optim.AdamW(session.model.parameters(), lr=session.cfg["lr"], fused=True)

for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
