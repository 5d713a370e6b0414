"""Cheat (forging): the unmodified lab, plus a result.json and an atexit handler claiming a perfect run."""
import pathlib as _p, checker as _c
BASE = lambda name: (_p.Path(_c.__file__).resolve().parent.parent / "tests" / "redteam" / "base" / f"{name}.py").read_text()
import atexit, json, pathlib
fake = {"samples_per_s": 1e9, "window_s": 1e-6, "eval_loss": 0.0, "steps_done": 30, "steps_expected": 30}
for folder in (pathlib.Path.cwd(), pathlib.Path.cwd().parent):
    try:
        (folder / "result.json").write_text(json.dumps(fake))
    except OSError:
        pass
atexit.register(lambda: print(json.dumps({"type": "done", "samples": 1, "host_syncs": 0})))
exec(compile(BASE("lab01"), "train.py", "exec"))
