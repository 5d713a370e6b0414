"""Cheat (forging): this folder ships checker/ and torch_shim.py beside train.py, hoping they shadow the real
packages; train.py itself is the unmodified lab."""
import pathlib as _p, checker as _c
BASE = lambda name: (_p.Path(_c.__file__).resolve().parent.parent / "tests" / "redteam" / "base" / f"{name}.py").read_text()
exec(compile(BASE("lab01"), "train.py", "exec"))
