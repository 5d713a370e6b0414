"""The `workbook` command: list chapters, run their scripts, check a lab, watch it, hints and solutions, profiling
recipes, read traces."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

from checker.base.chapters import VARIANTS, all_chapters, get_chapter, too_few_steps
from checker.base.errors import WorkbookError
from checker.learner.feedback import format_report
from checker.base.paths import display_path, repo_root
from checker.grader.precheck import check_candidate, check_syntax
from checker.base.tools import find_tool, require_tool


# -- list ---------------------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    from checker.learner import progress

    rows = []
    for chapter in all_chapters():
        rows.append({
            "progress": progress.describe(chapter.id),
            "id": chapter.id, "number": chapter.number, "title": chapter.title, "pattern": chapter.pattern,
            "lab": display_path(chapter.lab_script), "solution": display_path(chapter.solution_script),
            "checks": [c.name for c in chapter.checks],
            "devices": {d: [c.name for c in chapter.checks if c.threshold_for(d) is not None or c.name == "same_work"]
                        for d in ("cuda", "cpu") if d in chapter.workload},
        })
    if args.json:
        print(json.dumps(rows, indent=2))
    else:
        for row in rows:
            print(f"{row['id']:<22} {row['title']}")
            print(f"{'':<22} {row['progress']}")
            print(f"{'':<22} lab: {row['lab']}   checks on cuda: {', '.join(row['devices'].get('cuda', []))}; "
                  f"on cpu: {', '.join(row['devices'].get('cpu', [])) or 'none'}")
    return 0


# -- run ----------------------------------------------------------------------------------------------
def cmd_run(args: argparse.Namespace) -> int:
    chapter = get_chapter(args.chapter)
    script = chapter.script_for(args.variant)
    check_syntax(script)
    command = [sys.executable, str(script)]
    device = args.device
    if args.steps is not None:
        device = device or ("cuda" if _has_cuda() else "cpu")
        # said here: the script's own message offers its --warmup, which `workbook run` does not pass on
        warmup = int(chapter.config(device).get("warmup", 0)) if device in chapter.workload else 0
        if problem := too_few_steps(args.steps, warmup, device):
            raise WorkbookError(problem)
        command += ["--steps", str(args.steps)]
    if args.device:
        command += ["--device", args.device]
    if getattr(args, "job", None):
        command += ["--job", args.job]
    env = dict(os.environ, WORKBOOK_ROOT=str(repo_root()))
    if device == "cpu" or (device is None and not _has_cuda()):
        return _call_quieting_noise(command, env, None)  # torch's warnings expected on a CPU, explained
    return subprocess.call(command, env=env)


def _has_cuda() -> bool:
    from checker.grader.evaluate import cuda_available

    return cuda_available()


# -- check --------------------------------------------------------------------------------------------
def _progress_printer():
    """On a terminal, one line per run of a script, with the time so far (a GPU check takes minutes), and where
    each run's seconds went; nothing when stderr is a file or a pipe, so that logs and tests see only results
    and errors, unless WORKBOOK_PROGRESS=1 asks for the lines there too."""
    if not (sys.stderr.isatty() or os.environ.get("WORKBOOK_PROGRESS") == "1"):
        return None
    import time

    started = time.perf_counter()

    def show(line: str) -> None:
        print(f"  [{time.perf_counter() - started:5.0f} s] {line}", file=sys.stderr, flush=True)

    return show


def _names(text: str | None, what: str, example: str) -> list[str] | None:
    """--only's names, in the order given; none is refused: `--only ""` (an unset shell variable) would run every
    check, or grade every student."""
    if text is None:
        return None
    names = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not names:
        raise WorkbookError(f"--only {text!r}: names no {what}; give one or more, e.g. --only {example}")
    return names


def _only(text: str | None) -> set[str] | None:
    """The checks --only names (None: every check)."""
    names = _names(text, "check", "host_syncs")
    return None if names is None else set(names)


def _check_and_print(chapter, *, variant="lab", submission=None, device=None, trace_tool="torch", with_ncu=False,
                     keep_traces=None, only=None, as_json=False):
    """Compile the candidate first (a syntax error is reported before anything runs), grade it, print the report;
    a check of the learner's own lab is recorded in the progress file."""
    from checker.grader import forkserver

    forkserver.prestart()  # its imports of torch overlap this process's own
    from checker.grader.evaluate import evaluate, resolve_candidate

    check_candidate(resolve_candidate(chapter, variant, submission), chapter.id)
    own_lab = variant == "lab" and submission is None
    if own_lab:
        from checker.learner import progress

        checked = progress.lab_hash(chapter.id)  # the lab as this check reads it, before any run starts
    report = evaluate(chapter, variant=variant, submission=submission, device=device, trace_tool=trace_tool,
                      with_ncu=with_ncu, keep_traces=keep_traces, only=only, progress=_progress_printer())
    if own_lab:
        progress.record_check(report, lab_sha256=checked)
    print(json.dumps(report.to_json(), indent=2) if as_json else format_report(report, chapter, learner=own_lab),
          flush=True)
    return report


def cmd_check(args: argparse.Namespace) -> int:
    chapter = get_chapter(args.chapter)
    if args.ladder_trials is not None and args.ladder_trials < 1:
        raise WorkbookError(f"--ladder-trials {args.ladder_trials}: give 1 or more")
    if args.ladder or args.ladder_out or args.ladder_trials:
        from checker.grader.ladder import declared

        declared(chapter)  # a chapter without a [ladder]: one line, before any run
    if args.variant is not None and args.submission is not None:  # one script is graded: say which wins
        raise WorkbookError(f"--variant {args.variant} and --submission {args.submission}: give one of them; "
                            "--submission grades the lab file in that folder")
    only = _only(args.only)
    _trace_folder(args.keep_traces)
    report = _check_and_print(chapter, variant=args.variant or "lab", submission=args.submission,
                              device=args.device, trace_tool=args.trace_tool, with_ncu=args.with_ncu,
                              keep_traces=args.keep_traces, only=only, as_json=args.json)
    if args.ladder or args.ladder_out or args.ladder_trials:
        _ladder(chapter, report.device, args.ladder_out, quiet=args.json, trials=args.ladder_trials)
    elif "ladder" in chapter.raw and not args.json and report.device == "cuda":
        print(f"\nThe reference solution's ladder (each lever's gain, measured here; minutes on a GPU): "
              f"`workbook check {chapter.number:02d} --ladder`.")
    return report.exit_code


def _trace_folder(folder: Path | None) -> None:
    """--keep-traces: make the folder now, so that one that cannot be made is said before minutes of runs, not
    after them."""
    if folder is None:
        return
    if folder.exists() and not folder.is_dir():
        raise WorkbookError(f"--keep-traces {folder}: is a file, not a folder; name a folder for the traces")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise WorkbookError(f"--keep-traces {folder}: cannot create it ({err.strerror or err}); "
                            "name another folder") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise WorkbookError(f"--keep-traces {folder}: not writable by this user; name another folder")


def _ladder(chapter, device: str, out: Path | None, quiet: bool = False, trials: int | None = None) -> None:
    """Measure the chapter's ladder on ``device`` and print its table (checker.grader.ladder); with ``out``, also
    write the measurement (.json) and its table (.md) there. On a device the ladder skips, say why."""
    from checker.grader.ladder import measure, skip_reason
    from checker.pages.ladder import render

    stream = sys.stderr if quiet else sys.stdout  # with --json, stdout holds the report alone
    why = skip_reason(chapter, device)
    if why is not None:
        print(f"\nladder: skipped on {device}: {why}", file=stream)
        return
    result = measure(chapter, device, trials=trials, progress=_progress_printer())
    table = render(result)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        out.with_suffix(".md").write_text(table)
    print("\nThe ladder: the slow script, then the reference solution one lever at a time\n\n" + table, file=stream)


# -- watch, hint, solution ----------------------------------------------------------------------------
def cmd_watch(args: argparse.Namespace) -> int:
    from checker.learner.watch import watch_labs

    only = _only(args.only)
    return watch_labs(args.chapter, lambda chapter: _check_and_print(chapter, device=args.device, only=only).passed)


def cmd_hint(args: argparse.Namespace) -> int:
    from checker.learner.hints import next_hint

    print(next_hint(get_chapter(args.chapter)))
    return 0


def cmd_solution(args: argparse.Namespace) -> int:
    from checker.learner.hints import solution_diff

    diff, note = solution_diff(get_chapter(args.chapter), force=args.force)
    if note:
        print(note, file=sys.stderr)
    sys.stdout.write(diff)
    return 0


# -- assign -----------------------------------------------------------------------------------------
def cmd_assign(args: argparse.Namespace) -> int:
    from checker.grader.assignment import PRACTICE_LEARNER, SECRET_ENV, draw

    chapter = get_chapter(args.chapter)
    if not chapter.raw.get("jobs"):
        raise WorkbookError(f"chapter {chapter.id} has no mystery jobs to assign")
    found = draw(chapter, args.learner or PRACTICE_LEARNER)
    text = found.to_toml()
    if args.stdout:
        sys.stdout.write(text)
        return 0
    path = chapter.lab_script.parent / "assignment.toml"
    path.write_text(text)
    print(f"wrote {display_path(path)}: jobs {', '.join(found.codes)} for learner {found.learner!r}, from the "
          + ("course secret" if found.secret_kind == "course" else f"public practice secret ({SECRET_ENV} unset)"))
    return 0


# -- grade --------------------------------------------------------------------------------------------
def cmd_grade(args: argparse.Namespace) -> int:
    import signal

    def say(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    def terminated(signum, frame):  # `kill`, scancel: stop every student's grading, record nothing half-done
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, terminated)
    try:
        return _grade(args, say)
    except OSError as err:  # a full disk, a folder that vanished: what was graded so far is in the ledger
        raise WorkbookError(f"grading stopped: {err.strerror or err} ({err.filename or 'no file'}); what was "
                            "graded so far is in the ledger: run the same command again to resume") from None


def _grade(args: argparse.Namespace, say) -> int:
    from checker.grading import classroom as grading
    from checker.grading.gradebook import FEEDBACK_DIR, GRADEBOOK_NAME, Summary, table
    from checker.grading.submission import shown_name

    chapter = get_chapter(args.chapter)
    if args.collect and args.slurm:
        raise WorkbookError("--collect builds the gradebook from what was graded; --slurm grades: choose one")
    only = _names(args.only, "student", "alice,bob")
    if args.trace_tool == "nsys" and args.device == "cpu":
        raise WorkbookError("--trace-tool nsys traces CUDA work; use it with --device cuda, or use --trace-tool torch")
    if args.trace_tool == "nsys":
        require_tool("nsys", "--trace-tool nsys", "use --trace-tool torch")
    if args.baseline_every < 0:
        raise WorkbookError(f"--baseline-every {args.baseline_every}: give a number of students, or 0 to pair every "
                            "run with the slow script")
    gpu_names: list[str] | None = None

    def names() -> list[str]:
        nonlocal gpu_names
        if gpu_names is None:
            gpu_names = grading.visible_gpus()
        return gpu_names

    # under --slurm the GPUs are on the compute nodes: assume CUDA unless told --device cpu
    device = (args.device or "cuda") if args.slurm else grading.choose_device(args.device, names)
    if args.trace_tool is None:  # a class's trace claims rest on a trace the grader captures, where it can
        args.trace_tool = "nsys" if device == "cuda" and find_tool("nsys") is not None else "torch"
    submissions, out = args.submissions.resolve(), args.out.resolve()
    assignment = None
    if chapter.raw.get("answer_file"):  # chapter 08: each learner's jobs come from the course secret
        from checker.grader import assignment as assignments

        if assignments.secret()[1] == "practice" and not args.practice:
            raise WorkbookError(f"chapter {chapter.id} draws each learner's jobs from {assignments.SECRET_ENV}, which is "
                                "not set: set it to the secret you gave `workbook assign`, or pass --practice to grade "
                                "against the public practice jobs")
        assignment = assignments.fingerprint()
    timeout = args.student_timeout or grading.default_student_timeout(chapter, device)
    settings = grading.Settings(chapter=chapter, submissions=submissions, out=out, device=device,
                                trace_tool=args.trace_tool, student_timeout_s=float(timeout),
                                max_submission_bytes=int(args.max_submission_mb * (1 << 20)),
                                workbook_version=grading.workbook_version(),
                                baseline_every=args.baseline_every or None, assignment=assignment)
    grading_class = grading.GradingClass(settings)
    if grading_class.strays:
        say(f"ignored {len(grading_class.strays)} entr{'y' if len(grading_class.strays) == 1 else 'ies'} of "
            f"{args.submissions} that {'is' if len(grading_class.strays) == 1 else 'are'} not a student folder: "
            + ", ".join(map(shown_name, grading_class.strays[:5])) + (" ..." if len(grading_class.strays) > 5 else ""))
    slots = None
    if not (args.collect or args.slurm):  # refuse bad --gpus/--workers before touching any folder
        slots = grading.plan_slots(chapter, device, args.gpus, args.workers, names() if device == "cuda" else [])
    earlier = grading_class.earlier_output()
    if earlier and not args.force:  # what is there was made by another grading: rebuilding would replace it
        raise WorkbookError(f"--out {args.out}: {earlier}")
    changed = grading.prepare_out(settings)
    if changed:
        say(f"made {changed} entries of the submissions and output folders root-owned and not writable by "
            "group or others, so that graded code cannot write there")

    if args.collect:
        rows = grading_class.rebuild()
    elif args.slurm:
        from checker.grading import slurm

        todo = grading_class.needing_grading(only, args.force)
        rows = slurm.submit_and_maybe_wait(settings, grading_class, todo, args.sbatch_arg or [], args.shards,
                                           args.wait, say)
        if rows is None:
            return 0
    else:
        from checker.grading import slurm

        slurm.refuse_if_a_job_is_grading(settings)
        todo = grading_class.needing_grading(only, args.force)
        skipped = len(grading_class.select(only)) - len(todo)
        say(f"grading {len(todo)} of {len(grading_class.students)} submissions of {chapter.id} on "
            f"{', '.join(slot.label for slot in slots)}"
            + (f" ({skipped} unchanged since they were graded: kept; --force grades them again)" if skipped else ""))
        rows = grading.grade_locally(settings, grading_class, todo, slots, say)
    summary = Summary.of(rows)
    print(table(chapter, rows))
    print(f"\n{summary.line}")
    alike: dict[str, list[str]] = {}
    for row in rows:  # the same files handed in by several students: for the instructor to look at, not a verdict
        if row.get("submission_sha256"):
            alike.setdefault(row["submission_sha256"], []).append(row["student"])
    for names in (names for names in alike.values() if len(names) > 1):
        print(f"identical submissions (the same files): {', '.join(map(shown_name, names))}")
    print(f"gradebook: {args.out / GRADEBOOK_NAME}, feedback: {args.out / FEEDBACK_DIR}/, "
          f"ledger: {args.out / 'ledger.jsonl'}")
    return summary.exit_code


# -- profile ------------------------------------------------------------------------------------------
def cmd_profile(args: argparse.Namespace) -> int:
    chapter = get_chapter(args.chapter)
    if args.tool not in chapter.recipe:
        raise WorkbookError(f"chapter {chapter.id} has no {args.tool} recipe; it has: {', '.join(chapter.recipe)}")
    script = chapter.script_for(args.variant)
    out_dir = chapter.lab_script.parent / "profiles"
    out = out_dir / (f"{args.variant}-{args.tool}" + (f"-job-{args.job}" if args.job else ""))
    command = chapter.recipe[args.tool].format(script=display_path(script), out=display_path(out))
    if args.job:  # a chapter of mystery jobs (08): the job of your assignment to run
        command += f" --job {shlex.quote(args.job)}"
    print(command)
    look_for = chapter.look_for.get(args.tool)
    if look_for and not args.run:
        print(textwrap.fill("look for: " + look_for, 100), file=sys.stderr)
        if args.tool == "torch" and chapter.look_for.get("torch_cpu"):
            print(textwrap.fill("on a CPU, look for: " + chapter.look_for["torch_cpu"], 100), file=sys.stderr)
    if not args.run:
        if args.tool in ("nsys", "ncu") and find_tool(args.tool) is None:  # the command is for a GPU machine
            print(f"note: {args.tool} is not found here; run the command above on a machine with a GPU and "
                  f"{args.tool}, or here: workbook profile {chapter.number:02d} --tool torch --run", file=sys.stderr)
        return 0
    argv = shlex.split(command)
    if argv[0] in ("nsys", "ncu"):
        argv[0] = require_tool(argv[0], otherwise=f"without it: workbook profile {chapter.number:02d} --tool torch --run")
    argv = [sys.executable if a == "python" else a for a in argv]
    check_syntax(script)
    out_dir.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, WORKBOOK_ROOT=str(repo_root()))
    try:
        code = _call_quieting_noise(argv, env, repo_root())
    except OSError as err:  # the profiler is executable, yet not a program this machine runs
        raise WorkbookError(f"could not start {argv[0]} ({err.strerror or err}); point WORKBOOK_{args.tool.upper()} "
                            "or PATH at a working one") from None
    if code == 0:
        made = sorted(p for p in out_dir.glob(f"{out.name}*"))
        print("wrote " + ", ".join(display_path(p) for p in made) if made else "the tool wrote no report")
        if args.tool == "torch":
            _after_torch_profile(chapter, out)
    return code


def _after_torch_profile(chapter, out: Path) -> None:
    """What to run next on the trace, and what to look for in it on the device it ran on."""
    trace = out.with_name(out.name + ".json.gz")
    if not trace.is_file():
        return
    try:
        device = json.loads(out.with_name(out.name + ".result.json").read_text()).get("device")
    except (OSError, ValueError, AttributeError):
        device = None
    look_for = chapter.look_for.get("torch_cpu" if device == "cpu" else "torch")
    print(f"next: workbook report {display_path(trace)}")
    if look_for:
        where = "on this CPU, " if device == "cpu" else ""
        print(textwrap.fill(f"{where}look for: {look_for}", 100))


# Lines torch.profiler's Kineto writes to stderr that say nothing to a learner: its start/stop markers, and on
# a machine without a usable CUDA driver its probe for GPUs (code 35: cudaErrorInsufficientDriver).
_MARKER = re.compile(r"^USDT:.*\] profiler_(start|stop)\s*$")
_NO_GPU = re.compile(r"^ERROR:.*gpuGetDeviceCount failed with code (\d+)\s*$")
# The DataLoader's warning on a machine without a GPU, when the lab pins its batches (as chapters 02 and 03 teach);
# Python prints the warning's line, then the source line it came from (indented).
_PIN_MEMORY = re.compile(r"UserWarning: 'pin_memory' argument is set as true but no accelerator is found")
PIN_MEMORY_NOTE = ("note: torch warns that pin_memory=True finds no accelerator: expected on a CPU, where there is "
                   "no GPU to copy batches to; on a GPU the same setting is what makes the copies asynchronous")


def _call_quieting_noise(argv: list[str], env: dict[str, str], cwd: Path | None) -> int:
    """Run a command under a profiler or on a machine's CPU, in ``cwd`` (None: here); pass its output through, less
    Kineto's noise and the DataLoader's pin_memory warning, each explained once."""
    proc = subprocess.Popen(argv, cwd=cwd, env=env, stderr=subprocess.PIPE, text=True, errors="replace")
    explained = False
    pinned = skip_source = False
    try:
        for line in proc.stderr:
            if skip_source and line.startswith((" ", "\t")):  # the warning's source line
                skip_source = False
                continue
            skip_source = False
            if _PIN_MEMORY.search(line):
                if not pinned:
                    print(PIN_MEMORY_NOTE, file=sys.stderr, flush=True)
                    pinned = True
                skip_source = True
                continue
            if _MARKER.match(line):
                continue
            no_gpu = _NO_GPU.match(line)
            if no_gpu:
                if not explained:
                    print(f"note: torch.profiler looked for CUDA GPUs and found none (its `gpuGetDeviceCount failed "
                          f"with code {no_gpu.group(1)}`): harmless here, the trace records the CPU's activity only",
                          file=sys.stderr, flush=True)
                    explained = True
                continue
            sys.stderr.write(line)
            sys.stderr.flush()
        return proc.wait()
    except KeyboardInterrupt:
        proc.wait()
        raise


# -- the parser ---------------------------------------------------------------------------------------
def _folder(text: str) -> Path:
    """A folder argument; an empty one is refused: Path("") is the current folder, so `--out "$DIR"` or
    `--submission "$DIR"` with the variable unset would write into, or grade, whatever the current folder holds."""
    if not text.strip():
        raise argparse.ArgumentTypeError("give a folder (an empty path would mean the current folder)")
    return Path(text)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: give 1 or more")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text}: give a number above 0")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="workbook", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chapter_help = "chapter id or number, e.g. 01"
    variant_help = "which script: slow (the baseline), lab (yours, the default) or solution (the reference)"
    device_help = "cpu or cuda (default: cuda when torch sees a CUDA GPU, else cpu)"
    trace_help = "trace with torch.profiler (default; any device) or nsys (Nsight Systems; CUDA only)"

    p = sub.add_parser("list", help="list the chapters, with your progress in each")
    p.add_argument("--json", action="store_true", help="print one JSON list")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run a chapter's script and print samples/s")
    p.add_argument("chapter", help=chapter_help)
    p.add_argument("--variant", choices=VARIANTS, default="lab", help=variant_help)
    p.add_argument("--steps", type=int, metavar="N", help="steps to run, warm-up included (default: the chapter's)")
    p.add_argument("--device", choices=("cpu", "cuda"), help=device_help)
    p.add_argument("--job", metavar="LETTER", help="chapter 08: which job of your assignment to run")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("assign", help="chapter 08: write your mystery jobs (labs/08_triage/assignment.toml)")
    p.add_argument("chapter", help=chapter_help)
    p.add_argument("--learner", metavar="ID", help="the learner id the jobs are drawn for (default: practice); "
                   "with WORKBOOK_COURSE_SECRET set, a class's assignment")
    p.add_argument("--stdout", action="store_true", help="print it instead of writing the lab's assignment.toml")
    p.set_defaults(func=cmd_assign)

    p = sub.add_parser("check", help="grade a lab: same work, measured speedup, what the trace shows")
    p.add_argument("chapter", help=chapter_help)
    # no default here: a --variant given with --submission is refused, not silently ignored (None means lab)
    p.add_argument("--variant", choices=VARIANTS, default=None, help=variant_help)
    p.add_argument("--submission", type=_folder, metavar="DIR", help="a folder holding the lab file (instead of --variant)")
    p.add_argument("--device", choices=("cpu", "cuda"), help=device_help)
    p.add_argument("--trace-tool", choices=("torch", "nsys"), default="torch", help=trace_help)
    p.add_argument("--with-ncu", action="store_true", help="also run the chapter's Nsight Compute checks (GPU, ncu)")
    p.add_argument("--ladder", action="store_true",
                   help="after the checks, measure the reference solution's ladder: the slow script, then one lever "
                        "more per rung, samples/s and each rung's gain (chapters with a [ladder]; GPU; minutes)")
    p.add_argument("--ladder-out", type=Path, metavar="PATH",
                   help="with --ladder: also write the measurement to PATH.json and its table to PATH.md")
    p.add_argument("--ladder-trials", type=int, metavar="N",
                   help="with --ladder: trials per rung (default: chapter.toml's [ladder] trials); each compiles anew")
    p.add_argument("--only", metavar="CHECK[,CHECK]",
                   help="run only these checks (e.g. host_syncs): quicker while you work on one; the rest are skipped")
    p.add_argument("--keep-traces", type=Path, metavar="DIR",
                   help="copy the traces the checks read into DIR (<chapter>-candidate|baseline-<tool>.*), to open them")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("watch", help="check your lab each time you save it; on a pass, go on to the next chapter")
    p.add_argument("chapter", nargs="?", help="chapter id or number (default: the first one not yet passed)")
    p.add_argument("--device", choices=("cpu", "cuda"), help=device_help)
    p.add_argument("--only", metavar="CHECK[,CHECK]",
                   help="check only these (quicker rounds); a chapter counts as passed only when every check ran")
    p.set_defaults(func=cmd_watch)

    p = sub.add_parser("hint", help="the next hint for the check your lab last failed: a nudge, where to look, the pattern")
    p.add_argument("chapter", help=chapter_help)
    p.set_defaults(func=cmd_hint)

    p = sub.add_parser("solution", help="the reference solution as a diff against your lab, once your lab has passed here")
    p.add_argument("chapter", help=chapter_help)
    p.add_argument("--force", action="store_true", help="show it even though your lab has not passed on this machine")
    p.set_defaults(func=cmd_solution)

    p = sub.add_parser("grade", help="grade every submission in a folder: a gradebook and feedback per student")
    p.add_argument("chapter", help=chapter_help)
    p.add_argument("submissions", type=_folder, help="a folder with one subfolder per student, each holding the lab file")
    p.add_argument("--out", type=_folder, default=Path("grades"),
                   help="where ledger.jsonl, gradebook.csv and feedback/ go (default: grades); the same "
                        "class's earlier grading there is resumed, another chapter's or class's kept: see --force")
    p.add_argument("--device", choices=("cpu", "cuda"), help=device_help)
    p.add_argument("--trace-tool", choices=("torch", "nsys"), default=None,
                   help=trace_help.replace(" (default; any device)", " (any device)") + " (default for a class: nsys on a GPU where nsys is found, whose trace the grader "
                        "captures out of the student's reach; else torch)")
    p.add_argument("--only", metavar="STUDENT[,STUDENT]", help="grade only these students, again even when unchanged")
    p.add_argument("--force", action="store_true", help="grade every submission again, even unchanged ones (and "
                   "into an --out folder of another chapter or class, replacing its gradebook and feedback)")
    p.add_argument("--practice", action="store_true",
                   help="chapter 08: grade against the public practice jobs (without it, WORKBOOK_COURSE_SECRET must "
                        "be set: the secret each learner's jobs were drawn from)")
    p.add_argument("--gpus", metavar="0,1,...", help="the GPUs to grade on, one worker each (default: all visible)")
    p.add_argument("--workers", type=_positive_int, metavar="N",
                   help="on the CPU: grade N submissions at once (refused for chapters that time CPU checks)")
    p.add_argument("--student-timeout", type=_positive_float, metavar="SECONDS",
                   help="wall-clock limit for grading one student (default: from the chapter's per-run limit)")
    p.add_argument("--max-submission-mb", type=_positive_float, default=256,
                   help="a submission folder larger than this is not copied, nor graded (default: 256)")
    p.add_argument("--baseline-every", type=int, default=5, metavar="N",
                   help="measure the slow script's speed once per worker, then again after every N students, and "
                        "train the reference solution beside each student's runs (default: 5); 0: train the slow "
                        "script beside every run instead, as `workbook check` does")
    p.add_argument("--collect", action="store_true",
                   help="grade nothing: rebuild gradebook.csv and feedback/ from the ledger (after --slurm)")
    p.add_argument("--slurm", action="store_true", help="submit a Slurm array job instead of grading here")
    p.add_argument("--sbatch-arg", action="append", metavar="ARG",
                   help="with --slurm: one more argument for sbatch (repeat it), e.g. --sbatch-arg=--partition=gpu")
    p.add_argument("--shards", type=int, metavar="N",
                   help="with --slurm: N array tasks, each grading its share in turn (default: one task per student)")
    p.add_argument("--wait", action="store_true", help="with --slurm: wait for the job, then build the gradebook")
    p.set_defaults(func=cmd_grade)

    p = sub.add_parser("profile", help="print (or run) the chapter's profiling recipe")
    p.add_argument("chapter", help=chapter_help)
    p.add_argument("--tool", choices=("nsys", "ncu", "torch"), required=True,
                   help="nsys (Nsight Systems timeline), ncu (Nsight Compute, one kernel) or torch (torch.profiler)")
    p.add_argument("--variant", choices=VARIANTS, default="lab", help=variant_help)
    p.add_argument("--run", action="store_true", help="run it; the report goes beside the lab")
    p.add_argument("--job", metavar="LETTER", help="chapter 08: which job of your assignment to profile")
    p.set_defaults(func=cmd_profile)

    from checker.doctor.command import add_doctor_parser, cmd_doctor  # issue 41: one parser entry, one command

    add_doctor_parser(sub).set_defaults(func=cmd_doctor)

    try:
        from checker.trace.cli import add_report_parser, run_report
    except ImportError:  # the trace engine is optional at import time only while it is being built
        pass
    else:
        p = add_report_parser(sub)
        p.set_defaults(func=run_report)
    return parser



def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse already printed one usage line
        return 2 if exc.code not in (0, None) else 0
    try:
        return args.func(args)
    except WorkbookError as err:
        print(f"workbook: {err}", file=sys.stderr)
        return err.exit_code
    except KeyboardInterrupt:
        print("workbook: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `workbook report ... | head`: the reader left; stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
