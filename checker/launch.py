"""Run one chapter script the way the checker measures it, and write one JSON result.

    python -m checker.launch --script labs/01_item_syncs/train.py --result out.json [--trace torch]
        [--trace-out trace.json.gz] -- [script arguments: --steps N --device cpu ...]

The script runs in this process (``runpy``), exactly as ``python script.py`` would run it. Afterwards
this module, not the script, reads what ``checker.lab`` measured, evaluates the model the session built
on the chapter's held-out batch, and writes the result. Nothing the script prints is used.
"""

from __future__ import annotations

import argparse
import json
import runpy
import sys
import time
import traceback
from pathlib import Path

from checker import lab


def _where(exc: BaseException, script: Path) -> str | None:
    """file:line of the deepest frame inside the script, else the deepest frame of all."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if Path(f.filename).resolve() == script.resolve()]
    frame = (inside or frames or [None])[-1]
    return f"{frame.filename}:{frame.lineno}" if frame else None


def main(argv: list[str] | None = None) -> int:
    launched = time.monotonic()  # after Python, torch and the checker were imported (see checker.runs.phases)
    parser = argparse.ArgumentParser(prog="python -m checker.launch")
    parser.add_argument("--script", required=True, type=Path)
    parser.add_argument("--result", required=True, type=Path)
    parser.add_argument("--trace", choices=("torch", "none"), default="none")
    parser.add_argument("--trace-out", type=Path, default=None)
    args, script_args = parser.parse_known_args(argv)
    if script_args[:1] == ["--"]:
        script_args = script_args[1:]

    lab.LAUNCH = lab.LaunchOptions(trace=None if args.trace == "none" else args.trace, trace_out=args.trace_out)
    script = args.script.resolve()
    sys.argv = [str(script), *script_args]
    sys.path.insert(0, str(script.parent))
    result: dict = {"script": str(script)}
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:  # a script may call sys.exit(0) at its end
        if exc.code not in (None, 0):
            result.update(error=f"the script exited with {exc.code!r}", where=_where(exc, script))
    except BaseException as exc:  # noqa: BLE001 - everything the script raises is reported, not re-raised
        result.update(error=f"{type(exc).__name__}: {exc}", where=_where(exc, script))
        traceback.print_exc()

    session = lab.current()
    if "error" not in result:
        if session is None:
            result["error"] = "the script never called checker.lab.start(...)"
        else:
            result.update(session.result())
            if result["steps_done"] < result["steps_expected"]:
                result["incomplete"] = (
                    f"the script left session.steps() after {result['steps_done']} of "
                    f"{result['steps_expected']} steps"
                )
            else:
                import torch

                # the held-out loss is a property of the weights: evaluate the module itself, not a
                # torch.compile wrapper around it (which would compile a second, inference graph first)
                model = getattr(session.model, "_orig_mod", session.model)
                model.eval()
                with torch.no_grad():
                    result["eval_loss"] = float(session.workload.eval_loss(model))
    result.setdefault("clock", {}).update(launched=launched, evaluated=time.monotonic())
    args.result.parent.mkdir(parents=True, exist_ok=True)
    args.result.write_text(json.dumps(result))
    return 3 if "error" in result or "incomplete" in result else 0


if __name__ == "__main__":
    raise SystemExit(main())
