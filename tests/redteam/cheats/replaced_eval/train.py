"""Cheat (less work): skip training, and replace the workload's evaluation with one that returns the loss a
trained model would have."""
from checker.lab import start
session = start("01_item_syncs")
session.workload.eval_loss = lambda model: 0.01
import checker.base.workloads
checker.base.workloads.Workload.eval_loss = property(lambda self: (lambda model: 0.01))
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    pass
session.finish()
