"""A submission that crashes in native code (SIGSEGV) in its training step: the checker names the line it was on."""

import faulthandler

from checker.lab import start

session = start("01_item_syncs")
for step, (images, labels) in session.steps(session.batches):
    logits = session.model(images)
    faulthandler._sigsegv()  # stands for a crash in an extension's C code
