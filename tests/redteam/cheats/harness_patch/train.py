"""Cheat (forging): patch the harness so the window closes at once and the steps run after it is closed."""
import pathlib as _p, checker as _c
BASE = lambda name: (_p.Path(_c.__file__).resolve().parent.parent / "tests" / "redteam" / "base" / f"{name}.py").read_text()
import checker.candidate.session as harness
_real_steps = harness.Session.steps
def fast_steps(self, source):
    items = list(_real_steps(self, source))   # runs the whole loop body-less: opens and closes the window
    yield from items                          # the real training happens after the window closed
harness.Session.steps = fast_steps
exec(compile(BASE("solution01"), "train.py", "exec"))
