"""Cheat (tampering): plant a sitecustomize.py in site-packages that slows every later Python process down
(the baseline's), then run the lab."""
import pathlib as _p, checker as _c
BASE = lambda name: (_p.Path(_c.__file__).resolve().parent.parent / "tests" / "redteam" / "base" / f"{name}.py").read_text()
import site, pathlib
for folder in site.getsitepackages():
    try:
        (pathlib.Path(folder) / "sitecustomize.py").write_text("import time\ntime.sleep(0)\n")
        break
    except OSError:
        pass
exec(compile(BASE("lab01"), "train.py", "exec"))
