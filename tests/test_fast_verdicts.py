"""A clear speed verdict costs one timed pair; one near its threshold gets more (checker.grader.plan, throughput's
`settled`). The runs are stood in for: what is tested is when the grader stops timing."""

import dataclasses

import pytest

from checker.base.chapters import get_chapter
from checker.checks.evidence import Speed
from checker.checks.throughput import settled
from checker.grader.evaluate import Evaluation

# chapter 01's throughput check with its bar pinned at 1.5 on cuda, so that the cases below do not move with it
SPEC = dataclasses.replace(get_chapter("01").check("throughput"), threshold={"cuda": 1.5})


def speed(*ratios):
    return Speed(ratios=tuple(ratios), baseline_windows=(), candidate_windows=(), samples=1)


@pytest.mark.parametrize("ratios, clear", [
    ((1.80,), True),          # 20% over 1.5: one pair decides
    ((0.97,), True),          # the unmodified lab: far under
    ((1.60,), False),         # 7% over: not clear from one pair
    ((1.60, 1.62), True),     # two pairs, both over, median 7% over
    ((1.60, 1.45), False),    # on both sides
    ((1.52, 1.53), False),    # both over, but within 5% of the threshold
    ((1.40, 1.41), True),     # both under, 6% under
])
def test_when_the_speed_is_settled(ratios, clear):
    assert settled(speed(*ratios), SPEC, "cuda") == clear


class Window:
    def __init__(self, seconds):
        self.window_s, self.samples = seconds, 100


def grade_timed(monkeypatch, windows):
    """The timed pairs of up to 3 trials, each run answered from ``windows`` (baseline, candidate seconds per pair)."""
    chapter = get_chapter("01")
    ev = Evaluation(chapter, chapter.solution_script, "cpu")
    ev.runner.device, ev.runner.cfg = "cuda", chapter.config("cuda")  # judged as on a GPU; nothing here touches one
    ev.plan = dataclasses.replace(ev.plan, trials=3, traced=False, referee=False, timed_checks=("throughput",))
    answers = iter(windows)
    made = []

    def run(script, what, secret, **kwargs):
        made.append(script)
        return Window(next(answers))

    ev.runner.run = run
    try:
        return ev.make_runs(), made
    finally:
        ev.cleanup()


def test_a_clear_verdict_costs_one_pair(monkeypatch):
    runs, made = grade_timed(monkeypatch, [10.0, 5.0, 10.0, 5.0, 10.0, 5.0])  # 2x against 1.3
    assert len(runs.timed) == 1 and len(made) == 2


def test_a_verdict_near_its_threshold_gets_every_pair(monkeypatch):
    # chapter 01's bar is 1.3 on cuda; trial 1: baseline then candidate; trial 2: candidate then baseline;
    # 1.39x (7% over), 1.26x (under), 1.39x
    assert get_chapter("01").check("throughput").threshold_for("cuda") == 1.3
    runs, made = grade_timed(monkeypatch, [13.9, 10.0, 10.0, 12.6, 13.9, 10.0])
    assert len(runs.timed) == 3 and len(made) == 6
    assert [round(b.window_s / c.window_s, 2) for b, c in runs.timed] == [1.39, 1.26, 1.39]


# -- torch.compile's caches, kept per candidate script ---------------------------------------------------------
def test_each_script_has_a_cache_of_its_own(tmp_path, monkeypatch):
    from checker.grader import compile_cache

    monkeypatch.setenv("WORKBOOK_STATE_DIR", str(tmp_path / "state"))
    a, b = tmp_path / "a.py", tmp_path / "b.py"
    a.write_text("x = 1\n")
    b.write_text("x = 2\n")
    store_a = compile_cache.store_for("04_eager_microops", a, "cuda")
    assert store_a == compile_cache.store_for("04_eager_microops", a, "cuda")  # the same script: the same cache
    assert store_a != compile_cache.store_for("04_eager_microops", b, "cuda")  # another script: another
    assert store_a != compile_cache.store_for("04_eager_microops", a, "cpu")
    monkeypatch.setenv("WORKBOOK_COMPILE_CACHE", "0")
    assert compile_cache.store_for("04_eager_microops", a, "cuda") is None


def test_a_store_removed_by_a_check_beside_this_one_is_no_error(tmp_path, monkeypatch):
    """Checks side by side prune the same stores: one removed between the listing and its stat (CI's pytest
    workers, a class in parallel lanes) is skipped, and the newest KEEP stay."""
    import pathlib

    from checker.grader import compile_cache

    monkeypatch.setenv("WORKBOOK_STATE_DIR", str(tmp_path / "state"))
    scripts = []
    for n in range(compile_cache.KEEP + 2):
        scripts.append(tmp_path / f"s{n}.py")
        scripts[-1].write_text(f"x = {n}\n")
        compile_cache.store_for("04_eager_microops", scripts[-1], "cpu")
    real = pathlib.Path.iterdir

    def with_a_ghost(self):
        yield from real(self)
        yield self / "removed-by-another-check"

    monkeypatch.setattr(pathlib.Path, "iterdir", with_a_ghost)
    newest = compile_cache.store_for("04_eager_microops", scripts[0], "cpu")
    monkeypatch.setattr(pathlib.Path, "iterdir", real)
    stores = list(newest.parent.iterdir())
    assert newest in stores and len(stores) == compile_cache.KEEP


def test_only_a_chapter_whose_scripts_compile_keeps_a_cache_between_checks(tmp_path, monkeypatch):
    """A store that outlives a run is a place to keep anything for the next run: a chapter whose scripts do not
    compile (chapter 00: a report measured in one check and read back in the next) gets none."""
    from checker.base.chapters import get_chapter
    from checker.grader.evaluate import _compile_store

    monkeypatch.setenv("WORKBOOK_STATE_DIR", str(tmp_path / "state"))
    script = tmp_path / "train.py"
    script.write_text("x = 1\n")
    assert _compile_store(get_chapter("00"), script, "cpu", tmp_path, shared=False) is None
    assert _compile_store(get_chapter("06"), script, "cpu", tmp_path, shared=True) is None
    held = _compile_store(get_chapter("04"), script, "cpu", tmp_path, shared=False)
    assert held is not None
    held.release()


def test_every_run_sees_the_cache_at_one_path_held_by_one_check(tmp_path, monkeypatch):
    """Inductor's cached kernels name the folder they were compiled in: each run of a script must see its cache at
    the same path, and two checks of the script at once must not share that folder."""
    from checker.grader import compile_cache

    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(compile_cache, "PLACE_ROOT", tmp_path / "tmp")
    store = tmp_path / "store"
    store.mkdir()
    (store / "kernel.py").write_text("compiled")
    first = compile_cache.claim(store)
    assert first is not None and compile_cache.claim(store) is None  # held: a second check compiles cold
    first.fill(None)
    assert (first.place / "kernel.py").read_text() == "compiled"
    (first.place / "kernel.best_config").write_text("tuned")  # what the run wrote beside it
    place = first.place
    first.empty(keep=True)
    assert not place.exists() and (store / "kernel.best_config").read_text() == "tuned"
    first.fill(None)
    assert first.place == place and (place / "kernel.best_config").exists()  # the next run: the same path
    (place / "partial").write_text("x")
    first.empty(keep=False)  # a run that failed leaves nothing in the store
    assert not (store / "partial").exists()
    first.release()
    again = compile_cache.claim(store)
    assert again is not None and again.place == place
    again.release()


def test_checks_under_different_tmpdirs_see_one_place_and_one_lock(tmp_path, monkeypatch):
    """Two checks of one script, each with its own TMPDIR (two lanes of a GPU host, two Slurm jobs): the cache's
    kernels name the folder they were compiled in, so both must see it at the same path, one check at a time."""
    import tempfile

    from checker.grader import compile_cache

    (tmp_path / "root").mkdir()
    monkeypatch.setattr(compile_cache, "PLACE_ROOT", tmp_path / "root")
    store = tmp_path / "store"
    store.mkdir()
    places = []
    for lane in ("lane0", "lane1"):
        (tmp_path / lane).mkdir()
        monkeypatch.setenv("TMPDIR", str(tmp_path / lane))
        monkeypatch.setattr(tempfile, "tempdir", None)  # tempfile reads TMPDIR again
        held = compile_cache.claim(store)
        assert held is not None
        assert compile_cache.claim(store) is None  # the other lane, at the same time: compiles cold
        places.append(held.place)
        held.release()
    assert places[0] == places[1] and tmp_path / "root" in places[0].parents


def test_a_place_left_by_a_killed_check_is_removed_by_the_next_claim(tmp_path, monkeypatch):
    """Places live outside each check's TMPDIR now, so a check killed before it released its place (a grading
    task past its timeout) would leave it behind: the next claim removes every place whose lock nobody holds."""
    from checker.grader import compile_cache

    (tmp_path / "root").mkdir()
    monkeypatch.setattr(compile_cache, "PLACE_ROOT", tmp_path / "root")
    stores = []
    for name in ("killed", "running", "next"):
        stores.append(tmp_path / name)
        stores[-1].mkdir()
    killed = compile_cache.claim(stores[0])
    killed.fill(None)
    (killed.place / "kernel.py").write_text("compiled")
    killed.lock.close()  # the process died: its lock is gone, its place is not
    running = compile_cache.claim(stores[1])
    running.fill(None)
    assert not killed.place.exists()  # swept by the claim after it
    following = compile_cache.claim(stores[2])
    assert running.place.exists()  # held: left alone
    running.release()
    following.release()


def test_a_cache_copies_regular_files_and_never_follows_a_link(tmp_path):
    from checker.grader.compile_cache import copy_regular_files

    source, target, secret = tmp_path / "run", tmp_path / "store", tmp_path / "secret.txt"
    (source / "fxgraph").mkdir(parents=True)
    (source / "fxgraph" / "entry").write_text("compiled")
    secret.write_text("root's own file")
    (source / "fxgraph" / "link").symlink_to(secret)           # a run's link to a file it cannot read
    (source / "folder-link").symlink_to(tmp_path, target_is_directory=True)
    assert copy_regular_files(source, target) == len("compiled")
    assert (target / "fxgraph" / "entry").read_text() == "compiled"
    assert not (target / "fxgraph" / "link").exists() and not (target / "folder-link").exists()
    assert copy_regular_files(source, tmp_path / "small", limit=3) == 0  # over the limit: left out


def test_only_the_candidates_runs_get_its_cache(monkeypatch, tmp_path):
    from checker.grader import pairs as grader

    monkeypatch.setenv("WORKBOOK_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("WORKBOOK_COMPILE_CACHE", "1")
    chapter = get_chapter("04")
    ev = Evaluation(chapter, chapter.solution_script, "cpu")
    seen = {}

    def fake_run_script(chapter_, script, device, **kwargs):
        seen[script] = kwargs.get("compile_cache")
        return type("Run", (), {"phases_s": {}, "survivors": 0})()

    monkeypatch.setattr(grader, "run_script", fake_run_script)
    ev.runner.run(chapter.slow_script, "baseline", (1, 2))
    ev.runner.run(chapter.solution_script, "candidate", (1, 2))
    ev.cleanup()
    assert seen[chapter.slow_script] is None and seen[chapter.solution_script] == ev.runner.compile_store is not None


# -- the traced tail: the first timed pair is the traced pair (chapter.toml's traced_tail) ---------------------
def test_a_traced_tail_is_planned_only_for_torch_traces_where_speed_is_graded():
    from checker.grader.plan import make_plan

    chapter = get_chapter("06")
    assert chapter.config("cuda").get("traced_tail")
    steps = int(chapter.config("cuda")["trace_steps"])
    assert make_plan(chapter, "cuda").tail == steps
    assert "after its windows" in make_plan(chapter, "cuda").describe()
    assert make_plan(chapter, "cuda", trace_tool="nsys").tail == 0  # nsys wraps a whole process: a run of its own
    assert make_plan(chapter, "cuda", only={"host_syncs"}).tail == 0  # no timed pair to carry it
    assert make_plan(chapter, "cpu").tail == 0  # speed is not graded on a CPU here
    assert make_plan(get_chapter("01"), "cuda").tail == 0  # not set there: a traced pair of its own


def test_a_traced_window_traces_every_timed_run_where_chapter_toml_asks():
    """trace_window (chapter 07 on a GPU): the trace records the timed window itself, in every timed run, so a script
    cannot keep its pattern where no trace looks; no traced tail and no traced pair of its own."""
    from checker.grader.plan import make_plan

    chapter = get_chapter("07")
    assert chapter.config("cuda").get("trace_window")
    plan = make_plan(chapter, "cuda")
    assert plan.window and plan.tail == 0 and "traced over its window" in plan.describe()
    assert not make_plan(chapter, "cuda", trace_tool="nsys").window  # nsys: a traced run of its own
    # on a CPU, a chapter with timed pairs (their CPU time is pooled: chapters 03 and 07) traces every one over its
    # window, so no graded run goes untraced: red team 59's tellquarter_03 told its traced run by its step count, red
    # team 61's tellprof_07 by the profiler's hook (sys.getprofile()), and kept the lab's pattern in the other runs
    from checker.base.chapters import all_chapters

    timed = [c.id for c in all_chapters() if make_plan(c, "cpu").trials]
    assert {"03_dataloader_workers", "07_capstone_ladder"} <= set(timed), timed
    for chapter_id in timed:
        plan = make_plan(get_chapter(chapter_id), "cpu")
        assert plan.window and plan.tail == 0, (chapter_id, plan)


def test_with_a_traced_window_every_timed_run_is_traced_and_the_first_pair_is_read(monkeypatch):
    chapter = get_chapter("07")
    ev = Evaluation(chapter, chapter.solution_script, "cpu")
    ev.runner.device, ev.runner.cfg = "cuda", dict(chapter.config("cuda"), min_trials=2)  # both pairs made
    ev.plan = dataclasses.replace(ev.plan, trials=2, traced=True, tail=0, window=True, timed_checks=("throughput",),
                                  trace_baseline=False)
    made = []

    def run(script, what, secret, **kwargs):
        made.append((script, what, kwargs))
        return Window(10.0 if script == ev.reference else 1.0)

    ev.runner.run = run
    runs = ev.make_runs()
    ev.cleanup()
    assert len(made) == 4 and all(kwargs == {"trace": "torch"} for _, _, kwargs in made)  # both sides, every pair
    assert runs.traced is runs.timed[0] and runs.pairs() == runs.timed


def test_with_a_traced_tail_the_first_pair_is_traced_and_no_other_run_is_made(monkeypatch):
    chapter = get_chapter("07")
    ev = Evaluation(chapter, chapter.solution_script, "cpu")
    ev.runner.device, ev.runner.cfg = "cuda", chapter.config("cuda")
    ev.plan = dataclasses.replace(ev.plan, trials=3, traced=True, tail=10, window=False, timed_checks=("throughput",),
                                  trace_baseline=False)  # as on a GPU (on a CPU host_syncs traces the slow script)
    made = []

    def run(script, what, secret, **kwargs):
        made.append((script, what, kwargs))
        return Window(10.0 if script == ev.reference else 1.0)  # 10x: one pair decides

    ev.runner.run = run
    runs = ev.make_runs()
    ev.cleanup()
    assert len(made) == 2 and runs.traced is runs.timed[0]
    (_, _, baseline), (_, what, candidate) = made
    assert candidate == {"trace": "torch", "trace_tail": 10} and baseline == {} and "then traced" in what
    assert runs.pairs() == [runs.timed[0]]  # its weights are judged once


# -- the traced pair, when a check judges its speed (chapter 00's step_cost) ----------------------------------------
class Steps:
    def __init__(self, script, seconds):
        self.script, self.window_s, self.step_ms, self.samples = script, seconds, [seconds * 1e3 / 40] * 40, 100


def grade_traced(monkeypatch, windows):
    """Chapter 00's traced pair(s) on a CPU, each run answered from ``windows`` (seconds, in the order run)."""
    chapter = get_chapter("00")
    ev = Evaluation(chapter, chapter.solution_script, "cpu")
    ev.plan = dataclasses.replace(ev.plan, referee=False)
    answers = iter(windows)
    made = []

    def run(script, what, secret, **kwargs):
        made.append(script)
        return Steps(script, next(answers))

    ev.runner.run = run
    try:
        return ev.make_runs(), made, ev.runner.notes
    finally:
        ev.cleanup()


def test_a_clear_traced_pair_is_made_once(monkeypatch):
    runs, made, _ = grade_traced(monkeypatch, [1.0, 1.2])  # 1.2x, allowed 1.5x on a CPU
    assert len(made) == 2 and runs.traced[1].window_s == 1.2


def test_a_traced_pair_over_its_allowance_is_made_three_times_and_the_median_read(monkeypatch):
    """A machine busy while one pair ran (CI: both sides 7-14x their usual step, 1.79x apart) moves that pair, not
    three; a benchmark that paces its steps is slower in all three, and the median pair shows it."""
    chapter = get_chapter("00")
    slow, solution = chapter.slow_script, chapter.solution_script
    # the second and third pairs run in turns: candidate first, then baseline first
    runs, made, notes = grade_traced(monkeypatch, [1.0, 1.8, 1.1, 1.0, 1.0, 1.15])
    assert made == [slow, solution, solution, slow, slow, solution]
    assert (runs.traced[0].window_s, runs.traced[1].window_s) == (1.0, 1.15)  # ratios 1.8, 1.1, 1.15: the median
    assert any("1.80, 1.10, 1.15" in note for note in notes)
    runs, _, _ = grade_traced(monkeypatch, [1.0, 1.8, 1.7, 1.0, 1.0, 1.9])
    assert runs.traced[1].window_s / runs.traced[0].window_s == 1.8  # paced in all three: still over
