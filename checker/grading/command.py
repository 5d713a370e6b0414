"""What `workbook grade` does with its options: check them, choose the device and the trace tool, then grade the
class here, submit it to Slurm, or rebuild the gradebook from the ledger; print the table and say where it went."""

from __future__ import annotations

from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from checker.base.tools import find_tool
from checker.grader.evaluate import refuse_trace_tool


def names_of_students(text: str | None) -> list[str] | None:
    """--only's students, in the order given; none is refused: `--only ""` (an unset shell variable) would grade
    every student."""
    if text is None:
        return None
    given = list(dict.fromkeys(name.strip() for name in text.split(",") if name.strip()))
    if not given:
        raise WorkbookError(f"--only {text!r}: names no student; give one or more, e.g. --only alice,bob")
    return given


def grade_class(args, say) -> int:
    """Grade the class ``args`` (the parsed `workbook grade` options) names; ``say`` prints a line for the instructor.
    Returns the exit status: 0 when every student passed."""
    from checker.grading import classroom as grading
    from checker.grading.gradebook import FEEDBACK_DIR, GRADEBOOK_NAME, Summary, table
    from checker.grading.submission import shown_name

    chapter = get_chapter(args.chapter)
    if args.collect and args.slurm:
        raise WorkbookError("--collect builds the gradebook from what was graded; --slurm grades: choose one")
    only = names_of_students(args.only)
    if args.trace_tool is not None:
        refuse_trace_tool(chapter, args.trace_tool, args.device)
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
        args.trace_tool = ("nsys" if device == "cuda" and "nsys" in chapter.trace_tools and find_tool("nsys") is not None
                           else "torch")
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
