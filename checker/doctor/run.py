"""`workbook doctor`'s outer half: read the command the user gave, start their job under the launcher
(checker.doctor.launch, in their process; under nsys with --tool nsys), and read back what it recorded.

Nothing here runs in the user's process. The job's output (its stdout and stderr, in the order written) passes
through to doctor's stderr, less Kineto's start/stop markers: doctor's stdout holds its own report alone, so that
`--json` prints one JSON object whatever the job prints.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from checker.base.errors import WorkbookError
from checker.base.paths import repo_root
from checker.base.tools import require_tool

_KINETO_NOISE = re.compile(r"^(?:USDT:|ERROR:\S+ \S+ \d+:\d+ DeviceProperties\.cpp:\d+\] gpuGetDeviceCount|"
                           r"STAGE:|\[W\d+ .*CUPTIActivityProfiler)")
LAUNCHERS_LATER = {"accelerate": "accelerate launch", "deepspeed": "deepspeed"}


@dataclass
class Target:
    interpreter: list[str]   # python and its own options (-u, -O, -X ...)
    program: list[str]       # [script.py, args...] or ["-m", module, args...]
    launcher: list[str] = field(default_factory=list)  # torchrun and its options: every rank runs the launcher

    @property
    def shown(self) -> str:
        return shlex.join(self.launcher + self.program)


def _torchrun_target(command: list[str]) -> Target:
    """`torchrun [OPTIONS] train.py ARGS`: torchrun's options are everything before the first .py file."""
    script = next((i for i, word in enumerate(command) if word.endswith(".py")), None)
    if script is None or any(word in ("-m", "--module", "--no-python", "--no_python") for word in command[1:script]):
        raise WorkbookError("doctor runs torchrun with a script file: `workbook doctor -- torchrun --nproc-per-node 2 "
                            "train.py ARGS` (not -m or --no-python)")
    if not Path(command[script]).is_file():
        raise WorkbookError(f"{command[script]}: no such script (doctor runs it from {os.getcwd()})")
    return Target([sys.executable], command[script:], launcher=command[:script])


def parse_target(command: list[str]) -> Target:
    """What to run, from the words after `--`: `python train.py ARGS`, `python -m pkg.mod ARGS`, `train.py ARGS`."""
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise WorkbookError("give the job to run after --, e.g. `workbook doctor -- python train.py --epochs 1`")
    first = Path(command[0]).name
    if first == "torchrun":
        return _torchrun_target(command)
    if first in LAUNCHERS_LATER:
        raise WorkbookError(f"`{LAUNCHERS_LATER[first]}` is not supported by doctor yet: run one process of the job "
                            "(`workbook doctor -- python train.py ...`, one GPU)")
    if first.endswith(".py"):
        return Target([sys.executable], command)
    if not re.match(r"^python[\d.]*$", first):
        raise WorkbookError(f"doctor runs Python training scripts: `{command[0]}` is neither python nor a .py file "
                            "(give `-- python train.py ARGS` or `-- python -m package.module ARGS`)")
    interpreter, rest = [command[0]], command[1:]
    while rest and rest[0].startswith("-") and rest[0] not in ("-m", "-c", "-"):
        takes_value = rest[0] in ("-X", "-W", "--check-hash-based-pycs")
        interpreter += rest[:2] if takes_value else rest[:1]
        rest = rest[2:] if takes_value else rest[1:]
    if not rest:
        raise WorkbookError("no script given after python: `workbook doctor -- python train.py ARGS`")
    if rest[0] in ("-c", "-"):
        raise WorkbookError(f"`python {rest[0]}` is not supported: doctor needs a script file or `-m module`")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise WorkbookError("`python -m` needs a module name")
        return Target(interpreter, rest)
    if not Path(rest[0]).is_file():
        raise WorkbookError(f"{rest[0]}: no such script (doctor runs it from {os.getcwd()})")
    return Target(interpreter, rest)


@dataclass
class Recorded:
    record: dict
    trace: Path | None
    returncode: int
    rank_traces: list[Path] = field(default_factory=list)  # a torchrun job's: every rank's trace, rank 0 first


def record_job(target: Target, out: Path, *, warmup: int, steps: int, device: str, tool: str,
               timeout_s: float | None, step_at: str = "optimizer") -> Recorded:
    """Run the job under the launcher; its record says what happened (a missing record: the job was killed)."""
    out.mkdir(parents=True, exist_ok=True)
    options = ["--out", str(out), "--warmup", str(warmup), "--steps", str(steps), "--device", device, "--tool", tool,
               "--step-at", step_at, "--", *target.program]
    launcher = [*target.interpreter, "-m", "checker.doctor.launch", *options]
    if target.launcher:  # torchrun runs the launcher as each rank's module, each rank recording into out/rank<R>
        if tool == "nsys":
            raise WorkbookError("--tool nsys with torchrun is not supported yet: record the ranks with --tool torch")
        launcher = [*target.launcher, "-m", "checker.doctor.launch", *options]
    argv = launcher
    if tool == "nsys":
        nsys = require_tool("nsys", "workbook doctor --tool nsys", "use --tool torch")
        argv = [nsys, "profile", "-t", "cuda,nvtx,osrt", "--capture-range=cudaProfilerApi",
                "--capture-range-end=stop", "--force-overwrite=true", "-o", str(out / "trace"), *launcher]
    env = dict(os.environ)
    # the launcher must import from this workbook even where the user's python has it nowhere on its path;
    # last on the path, so that nothing of the user's is shadowed
    env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), str(repo_root())) if p)
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""  # --device cpu: the job sees no GPU, as on a machine without one
    try:
        proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                errors="replace")
    except OSError as err:
        raise WorkbookError(f"cannot start `{argv[0]}`: {err.strerror}") from None
    try:
        for line in proc.stdout:
            if not _KINETO_NOISE.match(line):
                sys.stderr.write(line)
                sys.stderr.flush()
        code = proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise WorkbookError(f"{target.shown} ran past --timeout {timeout_s:g} s before {warmup + steps} "
                            f"{_steps_of(step_at)}; give a larger --timeout, or fewer --steps") from None
    except KeyboardInterrupt:
        proc.kill()
        proc.wait()
        raise
    ranks = sorted((p for p in out.glob("rank*") if p.name[4:].isdigit()), key=lambda p: int(p.name[4:]))
    if target.launcher and ranks:
        out = ranks[0]  # rank 0's record speaks for the job; every rank's trace is read beside it
    path = out / "record.json"
    if not path.exists():
        raise WorkbookError(f"{target.shown} ended with status {code} before doctor's launcher could record anything "
                            "(killed, out of memory, or the python given has no torch)")
    record = json.loads(path.read_text())
    trace = None
    if tool == "torch" and (out / "trace.json").exists():
        trace = out / "trace.json"
    elif tool == "nsys":
        found = sorted(out.glob("trace*.nsys-rep"))
        trace = found[0] if found else None
    rank_traces = [r / "trace.json" for r in ranks if (r / "trace.json").exists()] if target.launcher else []
    return Recorded(record, trace, code, rank_traces if len(rank_traces) == len(ranks) else [])


def _steps_of(step_at: str) -> str:
    return "backward passes" if step_at == "backward" else "optimizer steps"


def refusal(record: dict, target: Target) -> str | None:
    """The one line for a job that did not give the steps asked, or None when it did."""
    status = record.get("status")
    asked = int(record.get("warmup", 0)) + int(record.get("steps_asked", 0))
    done = record.get("steps_done", 0)
    if status == "stopped":
        return None
    by_hand = ("it updates its weights some other way (by hand, as `p.data.add_(p.grad, alpha=-lr)`): run doctor "
               "with --step-at backward, and a step ends at each backward() instead")
    if status == "no optimizer":  # launch.NO_OPTIMIZER (the launcher runs in the job's process and imports nothing here)
        return (f"{target.shown} made {record.get('backwards')} backward passes (the last at "
                f"{record.get('backward_where')}) and no optimizer step(): {by_hand}. Doctor stopped the job there")
    backward = record.get("step_at") == "backward"
    unit = _steps_of(record.get("step_at", "optimizer"))
    step_ends = record.get("backwards") if backward else record.get("optimizers")  # none seen: no step to record
    if status == "crashed":
        where = f" at {record['error_where']}" if record.get("error_where") else ""
        return (f"{target.shown} crashed{where} after {done} {unit}: {record.get('error')} (the full "
                "traceback is in the doctor's folder: --out to keep it)")
    if status == "interrupted":
        return f"{target.shown} was interrupted after {done} {unit}"
    if not step_ends and status == "exited" and record.get("exit_code"):
        said = f" ({record['exit_message']})" if record.get("exit_message") else " (its own message is above)"
        return (f"{target.shown} exited with status {record['exit_code']} before any {unit[:-1]}{said}: doctor "
                "recorded nothing; run it alone and mend what it says")
    if not step_ends:
        tail = " and exited" if status == "exited" else ""
        if backward:
            return f"{target.shown} ran to its end{tail} without a backward pass: it trains nothing doctor can see"
        if record.get("backwards"):
            return (f"{target.shown} ran to its end{tail} after {record['backwards']} backward passes without calling "
                    f"an optimizer's step(): {by_hand}")
        return (f"{target.shown} ran to its end{tail} without calling an optimizer's step(): doctor finds training "
                "steps at torch.optim.Optimizer.step(), so it found none (an inference script, or an optimizer that "
                "is not a torch.optim.Optimizer)")
    ended = (f"exited with status {record.get('exit_code')}" if status == "exited" and record.get("exit_code")
             else "ended")
    if record.get("exit_message"):
        ended += f" ({record['exit_message']})"
    return (f"{target.shown} {ended} after {done} {unit}; doctor needs {asked} ({record.get('warmup')} "
            f"warm-up and {record.get('steps_asked')} recorded): give the script more steps or epochs, or doctor "
            "fewer (--warmup, --steps)")
