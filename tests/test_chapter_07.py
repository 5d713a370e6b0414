"""Chapter 07 (the capstone ladder): the ladder's rungs as declared, its table from a recorded measurement, its
skip on a CPU, and the CPU verdicts CI sees (the solution passes, the lab fails with its reads and its loader
named, the red-team cheats for this chapter are in tests/redteam/bank.toml)."""

import json
import statistics
from pathlib import Path

import pytest

from checker.base.chapters import get_chapter
from checker.base.errors import WorkbookError
from conftest import code_line_of

ROOT = Path(__file__).resolve().parent.parent
CHAPTER = "07_capstone_ladder"
RECORDED = ROOT / "tests" / "data" / "ladder" / "07-cpu-recorded.json"


# -- the ladder, as declared and as rendered (no runs) ----------------------------------------------------------
def test_the_ladder_starts_at_the_slow_script_and_ends_at_the_solution_as_graded():
    from checker.grader.ladder import rungs

    chapter = get_chapter(CHAPTER)
    ladder = rungs(chapter)
    assert [r.variant for r in ladder[:2]] == ["slow", "solution"] and ladder[0].settings == ()
    labels = [r.label for r in ladder]
    order = ["cudnn.benchmark", "channels_last", "bf16", "torch.compile"]  # the page's order
    assert [next(i for i, label in enumerate(labels) if name in label) for name in order] == sorted(
        next(i for i, label in enumerate(labels) if name in label) for name in order)
    assert any("beyond the source" in label for label in labels)
    # the base switches every lever off; the top rung is [workload.cuda]'s values, the solution the check grades
    cuda = chapter.config("cuda")
    base = dict(item.partition("=")[::2] for item in ladder[1].settings)
    top = dict(item.partition("=")[::2] for item in ladder[-1].settings)
    assert set(base) == set(top)
    assert all(base[key] != top[key] for key in base), "a lever the ladder never switches on"
    assert {key: str(cuda[key]).lower() for key in top} == {key: value.lower() for key, value in top.items()}


def test_each_rung_adds_one_change_to_the_rung_below():
    from checker.grader.ladder import rungs

    ladder = rungs(get_chapter(CHAPTER))
    for below, above in zip(ladder[1:], ladder[2:]):
        assert len(set(above.settings) - set(below.settings)) == 1, above.label


def test_the_ladder_table_renders_from_a_recorded_measurement():
    from checker.pages.ladder import render

    result = json.loads(RECORDED.read_text())
    table = render(result)
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| rung")]
    assert len(rows) == len(result["rows"]) >= 3
    speeds = [statistics.median(row["samples_per_s"]) for row in result["rows"]]
    for index, (line, row) in enumerate(zip(rows, result["rows"])):
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        assert cells[0] == row["label"] and cells[1] == f"{speeds[index]:,.0f}"
        assert cells[2] == ("" if index == 0 else f"{speeds[index] / speeds[index - 1]:.2f}x")
        assert cells[3] == f"{speeds[index] / speeds[0]:.2f}x"
    assert "a CPU with" in table and result["env"]["date"][:10] in table and result["env"]["torch"] in table


def test_the_ladder_is_skipped_on_a_cpu_with_its_reason_and_refused_where_none_is_declared():
    from checker.grader.ladder import declared, skip_reason

    reason = skip_reason(get_chapter(CHAPTER), "cpu")
    assert reason and "GPU" in reason
    assert skip_reason(get_chapter(CHAPTER), "cuda") is None
    with pytest.raises(WorkbookError, match="declares no \\[ladder\\]"):
        declared(get_chapter("04"))


def test_the_throughput_threshold_asks_for_more_than_the_earlier_chapters_fixes():
    """Set above the 1.07x the source's earlier fixes gave on a ResNet-50, with room below the 4x goal."""
    threshold = get_chapter(CHAPTER).check("throughput").threshold_for("cuda")
    assert 2.0 <= threshold < 4.0


# -- the CLI: the ladder's skip and refusal, one line each, no traceback ----------------------------------------
@pytest.mark.slow
def test_check_with_ladder_on_a_cpu_says_why_it_is_skipped(workbook):
    proc = workbook("check", "07", "--variant", "solution", "--device", "cpu", "--only", "host_syncs", "--ladder")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ladder: skipped on cpu: on a CPU the ladder's levers are GPU levers" in proc.stdout


def test_ladder_for_a_chapter_without_one_is_one_line_and_exit_2(workbook):
    proc = workbook("check", "04", "--ladder", "--device", "cpu")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "workbook: --ladder: chapter 04_eager_microops declares no [ladder] in chapter.toml; 07_capstone_ladder has one"]


# -- the CPU verdicts ------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_solution_passes_on_a_cpu_with_the_speed_checks_skipped_and_saying_why(graded):
    report = graded(CHAPTER, "solution")
    status = {c.name: c for c in report.checks}
    assert report.passed
    assert status["same_work"].status == "passed" and status["same_work"].measured["weight_distance"] < 1e-3
    # every window step's update checked (probe_updates = "all" on a CPU), the window's first among them
    cfg = get_chapter(CHAPTER).config("cpu")
    drawn = sorted(step["step"] for step in status["same_work"].measured["updates"]["steps"])
    assert drawn == list(range(int(cfg["warmup"]), int(cfg["steps"])))
    assert status["host_syncs"].status == "passed" and status["loader_settings"].status == "passed"
    for name in ("throughput", "pageable_copies"):
        assert status[name].status == "skipped" and "on a CPU" in status[name].reason


@pytest.mark.slow
def test_lab_fails_on_a_cpu_naming_each_read_and_the_loader(graded, pristine_lab):
    report = graded(CHAPTER, "lab")
    status = {c.name: c for c in report.checks}
    assert not report.passed and status["same_work"].status == "passed"  # the lab is the slow script: same work
    host_syncs = status["host_syncs"]
    assert host_syncs.status == "failed" and host_syncs.hint
    lab = (pristine_lab(CHAPTER) / "train.py").read_text()
    evidence = "\n".join(host_syncs.evidence)
    for text in ("running_loss += loss.item()", "if not torch.isfinite(loss):", "correct += float("):
        line = code_line_of(lab, text)
        assert f"train.py:{line} `" in evidence, (text, evidence)
    assert "workload.py" not in evidence  # the dataset reads nothing back: every sync is the learner's line
    loader = status["loader_settings"]
    assert loader.status == "failed" and any("num_workers=0" in line for line in loader.evidence)


def test_measured_ladders_are_rendered_from_their_runs_and_the_page_says_when_there_are_none():
    """docs/results/<id>-ladder-<gpu>.md is what its .json renders to, and the page includes it; until a GPU
    run lands, the page says the ladder is to be measured."""
    from checker.pages.ladder import render

    page = get_chapter(CHAPTER).docs_page.read_text()
    measured = sorted((ROOT / "docs" / "results").glob(f"{CHAPTER}-ladder-*.json"))
    for source in measured:
        assert source.with_suffix(".md").read_text() == render(json.loads(source.read_text())), source.name
        assert f'--8<-- "docs/results/{source.with_suffix(".md").name}"' in page
    if not measured:
        assert "The ladder measured on an H100 and on an H200: to be measured on H100/H200." in page


# -- same_work on a GPU: the committed tolerances against what the H100 measured ----------------------------------
H100_ROWS = ["2026-11-25-h100-session31-call2-checks.jsonl", "2026-11-25-h100-session31-call3-checks.jsonl",
             "2026-11-25-h100-session31-call4-checks.jsonl", "2026-11-25-h100-session31-call1-checks.jsonl"]
# and every GPU row the results are built from (both kinds), the H200's red team and a four-lane host's checks
GPU_ROWS = sorted(set(H100_ROWS + [row for kind in json.loads((ROOT / "evidence" / "history" / "assembly.json")
                                                             .read_text())["kinds"] for row in kind["rows"]]
                      + ["2026-11-27-h200-session38-call4-redteam.jsonl",
                         "2026-11-26-h100x4-session37-call2-lane3-call19-checks.jsonl",
                         # session 78: the solution at 0.3136 (past the old 0.29), half_steps_07 under the count
                         "2026-12-07-h100-session78-call78c-checks.jsonl",
                         "2026-12-07-h100-session78-call78d-checks.jsonl"]))
# Cheats that skip whole steps' training: the count of the steps that trained rejects them on a GPU (trace_window:
# every window step traced; same_work's steps_trained), not the weights, whose bf16 spread reaches theirs (the
# solution 0.3136, skip_quarter_07 0.339, half_steps_07 0.3393 and 0.3836). Each one's counted rows must show it.
STEP_SKIPPERS = {"cheats/half_steps_07", "cheats/skip_quarter_07"}


# The solution checks the weights' tolerances rejected, by (weight distance, worst layer): each a false failure on the
# record, not excused. evidence/history/2026-12-01-h200-session50-call2-checks.jsonl, row 1: the first check of a
# fresh H200 landed 0.56 from the slow script's weights (one layer 1.54) while its two drawn updates were one SGD
# step on their whole batches (0.083); the next five solution checks of the session landed 0.13 to 0.21.
KNOWN_SOLUTION_FAILURES = {(0.5592, 1.5361)}


def test_the_gpu_tolerances_pass_every_recorded_solution_pair_and_fail_every_recorded_cheat():
    """The weights judge chapter 07 on a GPU (the held-out loss swings mid-training): every bf16 solution and float32
    lab pair measured on a GPU lands inside the committed tolerances, and each cheat (half the steps, half of
    each batch, a smaller model) lands outside them, by the same rule the check applies, on an H100 and an H200."""
    from checker.checks.same_work import tolerances
    from gradinglib import recorded_same_work, weights_rejected

    import tomllib

    limits = tolerances(get_chapter(CHAPTER).check("same_work"), "cuda")
    assert limits["rel_tolerance"] == float("inf")  # shown, not judged: the chapter.toml says why
    # the cheats that do less work, which the weights must reject; another cheat (one that keeps its syncs where no
    # trace looks, say) trains the whole job and is some other check's to reject
    less_work = set()
    for bank in ("bank.toml", "gpu.toml"):
        for name, cheat in tomllib.loads((ROOT / "tests" / "redteam" / bank).read_text())["cheats"].items():
            if "same_work" in cheat.get("checks", []) or cheat.get("only") == "same_work":
                less_work.add(cheat.get("path", f"cheats/{name}"))
    seen = {"solution": 0, "lab": 0, "cheat": 0}
    counted = {name: 0 for name in STEP_SKIPPERS}
    for variant, measured in recorded_same_work(CHAPTER, GPU_ROWS):
        if variant.startswith("cheat/") and variant.removeprefix("cheat/") not in less_work:
            continue
        if variant.removeprefix("cheat/") in STEP_SKIPPERS:
            steps = measured.get("steps_trained") or {}  # (a row of 2026-12-01 counted against the median step)
            if steps.get("counted") and steps.get("idle", 0) > 0:
                counted[variant.removeprefix("cheat/")] += 1
            continue
        kind = "cheat" if variant.startswith("cheat/") else variant
        seen[kind] += 1
        rejected = weights_rejected(measured["weight_distance"], measured["worst_layer"], limits)
        if kind == "solution" and (measured["weight_distance"], measured["worst_layer"]) in KNOWN_SOLUTION_FAILURES:
            assert rejected  # recorded as it failed; docs/results/07_capstone_ladder.md counts it
            continue
        assert rejected == (kind == "cheat"), (variant, measured["weight_distance"], measured["worst_layer"])
    assert seen["solution"] >= 30 and seen["lab"] >= 10 and seen["cheat"] >= 10
    assert all(counted.values()), counted  # each step skipper failed the count on a GPU at least once on the record


def _train_and_probe(tmp_path, part: float, skip: int | None = None, opened: int | None = None):
    """Three SGD steps of chapter 07's CPU workload on the sampler's batches, the trainable tensors kept before
    each as the harness keeps them; then the referee's check of the middle step's update. ``part``: the share of
    each batch trained on; ``skip``: a step whose update is left out; ``opened``: the step at which the window opens,
    its last layer redrawn first (as the harness redraws the head from the window key)."""
    import torch

    from checker.base.workloads import load_workload_module
    from checker.candidate.session import UpdateProbe
    from checker.grader.referee import update_errors

    chapter = get_chapter(CHAPTER)
    cfg = dict(chapter.config("cpu"), seed=5)
    torch.manual_seed(5)
    workload = load_workload_module(chapter.dir).build(cfg, torch.device("cpu"))
    sampler, batch = workload.extras["sampler"], int(cfg["batch_size"])
    sampler.set_key(77)
    items = list(iter(sampler))
    probe = UpdateProbe(workload.model, sampler, batch)
    optimizer = torch.optim.SGD(workload.model.parameters(), lr=cfg["lr"], momentum=cfg["probe_momentum"],
                                weight_decay=cfg["probe_weight_decay"])
    for step in range(3):
        if step == opened:
            probe.snapshot_before_open(step)
            with torch.no_grad():
                head = [m for m in workload.model.modules() if isinstance(m, torch.nn.Linear)][-1]
                head.weight.normal_(0, 0.05)
        probe.snapshot(step)
        probe.placed(step, step)
        chunk = items[step * batch:(step + 1) * batch][:max(1, int(batch * part))]
        samples = [workload.dataset[item] for item in chunk]
        images, labels = torch.stack([s[0] for s in samples]), torch.tensor([s[1] for s in samples])
        if step != skip:
            optimizer.zero_grad()
            workload.loss_fn(workload.model(images), labels).backward()
            optimizer.step()
    probe.snapshot(3)
    path = tmp_path / "updates.pt"
    path.write_bytes(probe.payload([1, 2]))
    fresh = load_workload_module(chapter.dir).build(cfg, torch.device("cpu"))
    fresh.model.load_state_dict(workload.model.state_dict())  # as the referee loads the weights the run sent
    return update_errors(fresh, cfg, torch.device("cpu"), path, [1, 2], 77)


def test_the_referee_finds_each_drawn_update_one_step_on_its_whole_batch_and_nothing_less(tmp_path):
    """The drawn steps' updates (probe_updates): an honest float32 step recomputes to its applied gradient; a step on
    three quarters of its batch, or one skipped, lands far past update_tolerance on a CPU."""
    from checker.checks.same_work import _tolerance

    tolerance = _tolerance(get_chapter(CHAPTER).check("same_work"), "update_tolerance", "cpu", 0.0)
    honest = _train_and_probe(tmp_path, 1.0)
    assert [s["step"] for s in honest["steps"]] == [1, 2] and honest["worst"] < tolerance / 10, honest
    assert _train_and_probe(tmp_path, 0.75)["worst"] > 3 * tolerance
    skipped = _train_and_probe(tmp_path, 1.0, skip=2)
    assert next(s for s in skipped["steps"] if s["step"] == 2)["relative"] > 0.5
    # the window's first step, its head redrawn after the last warm-up step: drawn too (red team 65's firsthalf_07
    # trained that step, never drawn, on half its batch), its momentum taken from the tensors before the redraw
    first = _train_and_probe(tmp_path, 1.0, opened=1)
    assert next(s for s in first["steps"] if s["step"] == 1)["relative"] < tolerance / 10, first
    assert next(s for s in _train_and_probe(tmp_path, 0.5, opened=1)["steps"] if s["step"] == 1)["relative"] > tolerance


def test_the_update_probe_snapshots_the_tensors_the_model_holds_now(tmp_path):
    """A script that puts new tensors in the model's tables trains those: the snapshots are of what the model holds
    at each step (the harness's own walk), not of the tensors it held at start() (red team 66's decoy design kept the
    old ones on a fake path for the update check to read)."""
    import torch

    from checker.base.workloads import load_workload_module
    from checker.candidate.session import UpdateProbe

    chapter = get_chapter(CHAPTER)
    cfg = dict(chapter.config("cpu"), seed=5)
    workload = load_workload_module(chapter.dir).build(cfg, torch.device("cpu"))
    probe = UpdateProbe(workload.model, workload.extras["sampler"], int(cfg["batch_size"]))
    probe.snapshot(0)
    head = [m for m in workload.model.modules() if isinstance(m, torch.nn.Linear)][-1]
    held = head.bias
    head._parameters["bias"] = torch.nn.Parameter(torch.full_like(held, 7.0))  # trained from here on
    probe.snapshot(1)
    assert torch.equal(probe.flat[1][-held.numel():], torch.full_like(held, 7.0))
    assert not torch.equal(probe.flat[0], probe.flat[1])


def test_a_drawn_step_whose_batch_is_not_one_of_the_runs_epochs_is_refused(tmp_path):
    import torch

    from checker.base.workloads import load_workload_module
    from checker.grader.referee import update_errors

    chapter = get_chapter(CHAPTER)
    cfg = dict(chapter.config("cpu"), seed=5)
    workload = load_workload_module(chapter.dir).build(cfg, torch.device("cpu"))
    count = sum(p.numel() for p in workload.model.parameters())
    flat = torch.zeros(count)
    sent = torch.nn.utils.parameters_to_vector(workload.model.parameters()).detach()  # the weights the run sent
    path = tmp_path / "updates.pt"
    torch.save({"snapshots": {0: flat, 1: flat, 2: flat}, "places": {1: [123, 0]}, "last": sent}, path)
    assert "not one of the run's epochs" in update_errors(workload, cfg, torch.device("cpu"), path, [1], 77)["error"]
    torch.save({"snapshots": {0: flat, 1: flat[:-1], 2: flat}, "places": {1: [77 * 1_000_003, 0]}, "last": sent}, path)
    assert "no tensors" in update_errors(workload, cfg, torch.device("cpu"), path, [1], 77)["error"]
    # snapshots whose last is not the weights sent were kept of other tensors than those trained (decoys)
    torch.save({"snapshots": {0: flat, 1: flat, 2: flat}, "places": {1: [77 * 1_000_003, 0]}, "last": flat}, path)
    assert "not the weights the run sent" in update_errors(workload, cfg, torch.device("cpu"), path, [1], 77)["error"]


def test_probe_steps_are_drawn_inside_the_window_its_first_step_too():
    from checker.grader.runs import draw_probe_steps

    for _ in range(50):
        steps = draw_probe_steps(30, 80, 2)
        assert len(steps) == 2 and steps == sorted(set(steps)) and all(30 <= s <= 79 for s in steps)
    assert draw_probe_steps(8, 10, 5) == [8, 9]  # the window's first step too (the harness keeps the one before)


def test_the_audit_of_finished_batches_takes_each_batchs_items_by_the_workloads_batch_size():
    """A batch that says it holds one sample (its first tensor one row long) is still the k-th batch of B: its
    items are the sampler's k*B .. (k+1)*B-1, and a first 4-D tensor of one finished sample is not those B."""
    import torch
    from torch.utils.data import Dataset

    from checker.base.workloads import KeyedEpochs, Workload
    from checker.candidate.session import Finished

    class Samples(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, item):
            index, salt = item
            return torch.full((1, 2, 2), float(index * 1000 + salt % 7)), index

    dataset, sampler = Samples(), KeyedEpochs(8, seed=3)
    workload = Workload(model=torch.nn.Linear(1, 1), loss_fn=None, eval_loss=None, dataset=dataset,
                        extras={"sampler": sampler})
    finished = Finished(workload, keep=8, batch_size=4)
    items = list(iter(sampler))
    whole = torch.stack([dataset[item][0] for item in items[0:4]])
    finished.fetched((whole, torch.zeros(4)), in_window=True)                  # batch 0: its four finished samples
    one = torch.stack([dataset[items[4]][0]])
    finished.fetched((one, torch.zeros(4), torch.zeros(4, 1, 2, 2)), in_window=True)  # batch 1 says one sample
    assert finished.unfinished() == 1
    assert [len(kept_items) for _, kept_items in finished.kept] == [4, 4]


def test_an_unpickler_may_rebuild_a_batch_but_not_compute_one(tmp_path):
    """What a loader's batch is unpickled with in the training process: rebuilds of tensors, arrays and containers, and
    a script's plain batch classes, pass; a function, a library's class or a class whose construction runs the
    script's code is refused (red team 33's unpickle_prep_07 finished each batch so, and passed on an H100)."""
    import subprocess
    import sys
    script = tmp_path / "batches.py"
    script.write_text('''
import collections, dataclasses, functools, typing
import torch
from checker.candidate.session import _unpickle_allowed

class Batch(typing.NamedTuple):
    images: torch.Tensor
    labels: torch.Tensor

Pair = collections.namedtuple("Pair", "a b")

@dataclasses.dataclass
class Record:
    images: torch.Tensor

@dataclasses.dataclass
class Finished:
    images: torch.Tensor
    def __post_init__(self):
        self.images = self.images.flip(-1)

class Keys:
    def __init__(self, items):
        self.items = items
    def finish(self):
        return self.items

class Stateful:
    def __setstate__(self, state):
        self.images = state

class Listed(list):
    append = functools.partial(print)

class Meta(type):
    def __call__(cls, *args):
        return args

class Made(metaclass=Meta):
    pass

def finish(items):
    return items

def flip(self, value):
    self.__dict__["images"] = value.flip(-1)

@dataclasses.dataclass
class Sneaky:
    images: torch.Tensor

Sneaky.images = property(lambda self: self.__dict__["images"], flip)

@dataclasses.dataclass(frozen=True, slots=True)
class FrozenSlots:
    images: torch.Tensor

class MyError(Exception):
    pass

honest = [("torch.multiprocessing.reductions", "rebuild_tensor"), ("torch.multiprocessing.reductions",
          "rebuild_storage_fd"), ("torch.storage", "UntypedStorage"), ("torch", "Size"), ("torch", "Tensor"),
          ("torch", "bfloat16"), ("torch", "device"), ("torch._utils", "_rebuild_tensor_v2"),
          ("multiprocessing.resource_sharer", "DupFd"), ("numpy._core.multiarray", "_reconstruct"),
          ("numpy", "ndarray"), ("builtins", "list"), ("collections", "OrderedDict"), ("copyreg", "_reconstructor"),
          ("torch.utils.data._utils.worker", "_ResumeIteration"), ("torch._utils", "ExceptionWrapper"),
          ("builtins", "ValueError"), ("__main__", "Batch"), ("__main__", "Pair"), ("__main__", "Record"),
          ("__main__", "FrozenSlots"), ("__main__", "MyError"), ("torch.serialization", "_get_layout")]
cheats = [("__main__", "finish"), ("__main__", "Keys.finish"), ("__main__", "Keys"), ("__main__", "Stateful"),
          ("__main__", "Finished"), ("__main__", "Listed"), ("__main__", "Made"), ("torch.nn.functional", "pad"),
          ("torch", "Tensor.index_select"), ("torch", "flip"), ("torch.nn", "ReflectionPad2d"),
          ("multiprocessing.pool", "mapstar"), ("functools", "partial"), ("builtins", "getattr"),
          ("builtins", "map"), ("collections", "namedtuple"), ("__main__", "Sneaky"),
          # a dotted name walks from an allowed module to whatever it imported (pickle's protocol 4)
          ("copyreg", "__builtins__.get"), ("multiprocessing.reduction", "os.system"),
          ("torch.utils.data.dataloader", "torch.nn.Linear"), ("numpy.dtypes", "__builtins__.get"),
          ("collections", "_itemgetter"), ("collections", "_starmap"),
          ("torch._utils", "_rebuild_device_tensor_from_cpu_tensor")]
print([pair for pair in honest if not _unpickle_allowed(*pair)])
print([pair for pair in cheats if _unpickle_allowed(*pair)])
''')
    # the lookups resolve modules already imported, as an unpickler's in a DataLoader's training process do
    done = subprocess.run([sys.executable, "-c", "import multiprocessing.pool, numpy, torch.multiprocessing.reductions, "
                           "torch.utils.data, "
                           f"runpy; runpy.run_path({str(script)!r}, run_name='__main__')"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    refused_honest, allowed_cheats = done.stdout.strip().splitlines()
    assert refused_honest == "[]", f"honest lookups refused: {refused_honest}"
    assert allowed_cheats == "[]", f"computing lookups allowed: {allowed_cheats}"
