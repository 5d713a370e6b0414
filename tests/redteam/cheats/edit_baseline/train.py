"""Cheat (tampering): slow the baseline down (a sleep in every step of slow.py), then run the lab."""
import pathlib as _p, checker as _c
BASE = lambda name: (_p.Path(_c.__file__).resolve().parent.parent / "tests" / "redteam" / "base" / f"{name}.py").read_text()
import pathlib, checker
target = pathlib.Path(checker.__file__).parent.parent / "chapters" / "01_item_syncs" / "slow.py"
text = target.read_text()
if "import time as _t" not in text:
    target.write_text(text.replace("    logits = model(images)", "    import time as _t; _t.sleep(0.05)\n    logits = model(images)"))
exec(compile(BASE("lab01"), "train.py", "exec"))
