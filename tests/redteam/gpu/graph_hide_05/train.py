"""Cheat (hiding kernels, GPU): chapter 05's slow script, its eager fp32 chain replayed as CUDA graphs.

Nothing is fused: every elementwise pass still runs, one kernel each. But a CUDA graph replays them with one launch,
and nsys without --cuda-graph-trace=node records a replay as one bar with no kernels in it, so a check that counted
the elementwise kernels of such a trace would count none and pass. The grader's nsys traces graphs kernel by kernel
(checker/grader/runs.py, nsys_profile), and torch.profiler lists a graph's kernels: elementwise_kernels must fail
with either tool.
"""

import torch

from checker.lab import start

session = start("05_pointwise_chains")
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], fused=True)
if session.device.type == "cuda":
    # the forward and its backward captured once, replayed every step (inputs copied into the graph's own buffers);
    # the sample is the first batch, read without advancing the order the steps draw from
    model = torch.cuda.make_graphed_callables(model, (session.batches.batches[0][0],))

for step, (inputs, targets) in session.steps(session.batches):
    outputs = model(inputs)
    loss = session.loss_fn(outputs, targets)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")

session.finish()
