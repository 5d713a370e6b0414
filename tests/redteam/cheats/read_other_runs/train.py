"""Cheat (tampering): look through other runs' folders for trained weights to send back instead of training."""
import glob, os, tempfile, torch
from checker.lab import start
session = start("01_item_syncs")
stolen = None
for pattern in ("/tmp/workbook-*/*/*.pt", "/tmp/workbook-*/*/*", os.path.join(tempfile.gettempdir(), "..", "..", "*", "*.pt")):
    for path in glob.glob(pattern):
        if not os.path.isfile(path):  # named pipes of the grader's channel would block a read
            continue
        try:
            stolen = torch.load(path, weights_only=True)
            break
        except Exception:
            continue
    if stolen:
        break
try:
    session.model.load_state_dict(stolen or {})
except RuntimeError:  # weights of some other model: keep looking would cost time; take what fits
    pass
for step, (images, labels) in session.steps(session.batches):
    images, labels = images.to(session.device), labels.to(session.device)
    pass  # no training: the stolen weights are the result
session.finish()
