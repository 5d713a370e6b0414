"""Chapter 08 lab: fix one of your mystery jobs, once you know which wall it hits.

This is the slow script: every job of your assignment (labs/08_triage/assignment.toml) runs this code with
its own sizes. First diagnose all of them and write labs/08_triage/answer.toml; then pick one job, name it
in answer.toml's [fix], and change this loop to fix what holds that job back.

    python labs/08_triage/train.py --job a --steps 20       # one job; prints samples/s
    workbook profile 08 --tool torch --run --job a           # its trace; then `workbook report` on it
    workbook check 08                                        # grades the answer and this fix

Only this file and answer.toml are yours to edit. The jobs' data and model come from chapters/08_triage/.
"""


import torch
from torch.utils.data import DataLoader

from checker.lab import start

session = start("08_triage")
model = session.model
# TODO: a launch-bound job launches fewer, bigger kernels with torch.compile and a fused optimizer
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], foreach=False)

# TODO: a data-bound job needs its batches prepared in worker processes, ahead of the step
loader = DataLoader(
    session.dataset,
    batch_size=session.extras["batch_size"],
    sampler=session.extras["sampler"],  # a new order every epoch, the same in every variant
    drop_last=True,
)
for step, (inputs, labels) in session.steps(loader):
    inputs = inputs.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(inputs), labels)

    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")  # one read per logging interval: allowed

session.finish()
