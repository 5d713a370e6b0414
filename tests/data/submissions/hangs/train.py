"""A submission that never finishes its first step: the checker must stop it and say so."""

import time

from checker.lab import start

session = start("01_item_syncs")
for step, (images, labels) in session.steps(session.batches):
    while True:
        time.sleep(1)
