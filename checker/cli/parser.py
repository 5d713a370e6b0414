"""The `workbook` command's arguments, every command's in one place; each command's code is a module of its own."""

from __future__ import annotations

import argparse
from pathlib import Path

from checker.base.chapters import VARIANTS
from checker.cli.assign import cmd_assign
from checker.cli.check import cmd_check
from checker.cli.doctor import add_doctor_parser, cmd_doctor
from checker.cli.grade import cmd_grade
from checker.cli.hint import cmd_hint
from checker.cli.list_chapters import cmd_list
from checker.cli.profile import cmd_profile
from checker.cli.report import add_report_parser, run_report
from checker.cli.run import cmd_run
from checker.cli.solution import cmd_solution
from checker.cli.watch import cmd_watch

DESCRIPTION = ("The `workbook` command: list chapters, run their scripts, check a lab, watch it, hints and solutions, "
               "profiling recipes, read traces.")


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
    parser = argparse.ArgumentParser(prog="workbook", description=DESCRIPTION)
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

    p = add_report_parser(sub)
    p.set_defaults(func=run_report)

    add_doctor_parser(sub).set_defaults(func=cmd_doctor)
    return parser
