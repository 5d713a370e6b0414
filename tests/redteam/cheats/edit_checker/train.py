"""Cheat (tampering): make the sync check pass whatever it finds, in the grader's own files, then run the lab."""
import pathlib as _p, checker as _c
BASE = lambda name: (_p.Path(_c.__file__).resolve().parent.parent / "tests" / "redteam" / "base" / f"{name}.py").read_text()
import pathlib, checker
target = pathlib.Path(checker.__file__).parent / "checks" / "host_syncs.py"
text = target.read_text()
if "status = PASSED  # cheat" not in text:
    target.write_text(text.replace("status = PASSED if per_step <= threshold else FAILED", "status = PASSED  # cheat"))
exec(compile(BASE("lab01"), "train.py", "exec"))
