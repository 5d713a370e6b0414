"""Cheat (forking behind a made-up event): fork_late with the parent's wait for its child inside an event of its
own (_RecordFunctionFast), so the step looks accounted for.

fork_late's description: Cheat (moving work out of the profiled process, between the grader's process snapshots): the parent
runs warm-up steps 0-4 itself, then forks a child that inherits the optimizer's state and runs every later
step (the lab's eager step, unchanged) on the shared-memory model. The child exits inside the last step, so
no process is under the run at the first step nor at the window's close."""
import os

import torch

from checker.lab import start

session = start("04_eager_microops")
model = session.model
model.share_memory()
optimizer = torch.optim.AdamW(model.parameters(), lr=session.cfg["lr"], weight_decay=session.cfg["weight_decay"],
                              foreach=False)
all_batches = session.batches.batches
last = session.total_steps - 1
FORK_AT = 5
pid = None
Cover = torch._C._profiler._RecordFunctionFast


def train(step, inputs, labels):
    loss = session.loss_fn(model(inputs), labels)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    optimizer.step()
    if session.is_log_step(step):
        print(f"step {step:4d}  loss {loss.item():.4f}", flush=True)


for step, batch in session.steps(session.batches):
    if step < FORK_AT:
        train(step, *batch)
        continue
    if step == FORK_AT:
        to_child_r, to_child_w = os.pipe()
        to_parent_r, to_parent_w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: optimizer state inherited, parameters shared
            while True:
                message = os.read(to_child_r, 8)
                step_c, index = int(message[:4]), int(message[4:])
                train(step_c, *all_batches[index])
                os.write(to_parent_w, b"k")
                if step_c == last:
                    os._exit(0)
    index = next(i for i, b in enumerate(all_batches) if b is batch)
    with Cover("train_step"):  # a cpu_op over the wait for the child
        os.write(to_child_w, b"%04d%04d" % (step, index))
        os.read(to_parent_r, 1)
    if step == last:
        os.waitpid(pid, 0)  # gone before the window closes

session.finish()
