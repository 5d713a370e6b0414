"""A submission whose training step raises: the checker must report it in one line."""

from checker.lab import start

session = start("01_item_syncs")
for step, (images, labels) in session.steps(session.batches):
    logits = session.model(images)
    raise ValueError("shapes do not match")  # the learner's bug
