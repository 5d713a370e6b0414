"""`workbook doctor` on scripts written the ways people write them (tests/data/doctor/), each with one planted
problem: doctor must name the chapter that teaches its fix and the line (or function) of the script responsible.
Then the jobs it must refuse with one line, and the chapters' own slow scripts as their chapters diagnose them.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from checker.base.errors import WorkbookError
from checker.cli import main
from checker.doctor.run import parse_target
from conftest import code_line_of

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "tests" / "data" / "doctor"


@pytest.fixture(autouse=True)
def one_thread(monkeypatch):
    """The jobs run with one intra-op thread: on a small shared machine torch's default pool of threads, contended,
    made a tiny matmul take 30 ms, and every share of the step with it."""
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def doctor(capsys, *command: str, options=()) -> tuple[int, dict | str, str]:
    code = main(["doctor", "--device", "cpu", "--json", *options, "--", "python", *command])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else out), err


def planted_line(script: Path) -> int:
    return next(i for i, line in enumerate(script.read_text().splitlines(), 1) if "PLANTED" in line)


def named(diagnosis: dict, chapter: str) -> dict:
    found = [f for f in diagnosis["findings"] if f["chapter"]["number"] == chapter]
    assert found, f"chapter {chapter} not named: {[(f['chapter']['number'], f['title']) for f in diagnosis['findings']]}"
    return found[0]


def covers(lines: list[str], path: str, line: int) -> bool:
    """A finding's line 'p:41: ...' or function 'p:18-23 (forward): ...' holds path:line."""
    for text in lines:
        wheres = [text.split(" ", 1)[0].rstrip(":")]
        if " in " in text and "(" in text:  # a sync's function: '... in compute_loss (p:31-35)'
            wheres.append(text.rpartition("(")[2].rstrip(")"))
        if any(_holds(where, path, line) for where in wheres):
            return True
    return False


def _holds(where: str, path: str, line: int) -> bool:
    """'p:41' or 'p:18-23' names path and holds line."""
    if path not in where:
        return False
    lo, _, hi = where.rpartition(":")[2].partition("-")
    return lo.isdigit() and int(lo) <= line <= int(hi or lo)


@pytest.mark.slow
@pytest.mark.parametrize("script, chapter, first", [
    ("plain_loop.py", "01", False),    # loss.item() every step (its tiny model: the fetch may outweigh it)
    ("accumulation.py", "03", True),   # a num_workers=0 DataLoader, four batches per optimizer step
    ("hf_trainer.py", "06", True),     # logits[mask] inside the trainer's compute_loss
    ("no_loader.py", "04", False),     # hundreds of tiny ops per step, no DataLoader at all
])
def test_doctor_names_the_planted_problem_and_its_line(capsys, script, chapter, first):
    path = SCRIPTS / script
    code, d, err = doctor(capsys, str(path.relative_to(Path.cwd()) if path.is_relative_to(Path.cwd()) else path))
    assert code == 0, err
    finding = named(d, chapter)
    assert covers(finding["lines"], script, planted_line(path)), finding["lines"]
    if first:  # ranked by cost, which a CPU only estimates: on a loaded machine another finding may edge ahead
        assert chapter in [f["chapter"]["number"] for f in d["findings"][:2]], [f["chapter"]["number"] for f in d["findings"]]
    assert "stopped here, on purpose" in err
    if script == "accumulation.py":
        assert d["wall"] == "data" and d["fetches_per_step"] == [4] * d["steps"]
    if script == "no_loader.py":
        assert any("no DataLoader fetch was seen" in n for n in d["notes"])
        assert d["wall"] == "overhead"


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "job.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


TRAIN = """
import sys
import torch
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range({steps}):
    {before}
    model(torch.randn(2, 4)).sum().backward()
    opt.step()
    opt.zero_grad()
{after}
"""


@pytest.mark.slow
@pytest.mark.parametrize("body, said", [
    (TRAIN.format(steps=3, before="pass", after=""), "ended after 3 optimizer steps; doctor needs 8"),
    (TRAIN.format(steps=3, before="pass", after="sys.exit(2)"), "exited with status 2 after 3 optimizer steps"),
    (TRAIN.format(steps=20, before="if step == 4: raise ValueError('bad batch')", after=""),
     "job.py:7 after 4 optimizer steps: ValueError: bad batch"),
    ("import torch\nprint(torch.ones(2).sum())\n", "without calling an optimizer's step()"),
    ("import sys\nsys.exit('--steps 5: give --steps 11 or more')\n",
     "exited with status 1 before any optimizer step (--steps 5: give --steps 11 or more)"),
])
def test_a_job_that_gives_no_steps_gets_one_line_and_a_failing_exit(capsys, tmp_path, body, said):
    code, out, err = doctor(capsys, write(tmp_path, body))
    assert code != 0
    said_lines = [line for line in err.splitlines() if line.startswith("workbook: ")]
    assert len(said_lines) == 1 and said in said_lines[0], err
    assert "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["job.py"]  # nothing left beside the user's script


@pytest.mark.slow
def test_two_optimizers_a_step_ends_at_the_one_that_steps_least(capsys, tmp_path):
    body = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    D, G = torch.nn.Linear(4, 1), torch.nn.Linear(4, 4)
    opt_d = torch.optim.Adam(D.parameters())
    opt_g = torch.optim.Adam(G.parameters())
    loader = DataLoader(TensorDataset(torch.randn(512, 4)), batch_size=4)
    batches = iter(loader)
    for step in range(40):
        for critic in range(2):                 # the critic steps twice per generator step
            real, = next(batches)
            D(real).mean().backward(); opt_d.step(); opt_d.zero_grad()
        D(G(torch.randn(4, 4))).mean().backward(); opt_g.step(); opt_g.zero_grad()
    """
    code, d, err = doctor(capsys, write(tmp_path, body), options=("--out", str(tmp_path / "doc")))
    assert code == 0, err
    assert [o["class"] for o in d["optimizers"]] == ["Adam", "Adam"]
    assert d["fetches_per_step"] == [2] * d["steps"]          # two critic batches per generator step
    record = json.loads((tmp_path / "doc" / "record.json").read_text())
    assert record["anchor_where"].endswith("job.py:13")        # opt_g.step(): the step's end
    assert any("2 optimizers step" in n for n in d["notes"])


BY_HAND = """
import torch
model = torch.nn.Linear(4, 1)
for step in range({steps}):
    model.zero_grad()
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-0.01)   # the update by hand, as pytorch/examples' word_language_model does
open("finished.txt", "w").write("the job ran to its end")
"""


@pytest.mark.slow
def test_a_job_that_updates_its_weights_by_hand_is_stopped_and_told_of_step_at_backward(capsys, tmp_path,
                                                                                       monkeypatch):
    from checker.doctor.launch import BACKWARD_LIMIT

    monkeypatch.chdir(tmp_path)
    code, out, err = doctor(capsys, write(tmp_path, BY_HAND.format(steps=BACKWARD_LIMIT + 50)))
    said = [line for line in err.splitlines() if line.startswith("workbook: ")]
    assert code != 0 and len(said) == 1, err
    assert f"made {BACKWARD_LIMIT} backward passes (the last at job.py:7)" in said[0] and "--step-at backward" in said[0]
    assert not (tmp_path / "finished.txt").exists()   # stopped at the limit: the rest of the job never ran
    code, d, err = doctor(capsys, write(tmp_path, BY_HAND.format(steps=20).replace("open(", "    print(step)\nopen(")),
                          options=("--step-at", "backward", "--out", str(tmp_path / "doc")))
    assert code == 0, err
    assert d["steps"] == 5 and "stopped here, on purpose" in err   # d: stdout held the report alone
    assert "\n3\n" in err                                          # what the job printed went to stderr
    record = json.loads((tmp_path / "doc" / "record.json").read_text())
    assert record["anchor"] == "backward()" and record["anchor_where"].endswith("job.py:7")
    assert not (tmp_path / "finished.txt").exists()


@pytest.mark.slow
def test_syncs_made_inside_the_optimizers_own_step_are_told_apart(capsys, tmp_path):
    body = """
    import torch
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for step in range(30):
        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss
        opt.step(closure)
    """
    code, d, err = doctor(capsys, write(tmp_path, body))
    assert code == 0, err
    inside = [f for f in d["findings"] if "inside the optimizer's step() (LBFGS" in f["title"]]
    assert inside and inside[0]["chapter"]["number"] == "01", [f["title"] for f in d["findings"]]
    assert any(line.startswith(("job.py:12", str(tmp_path / "job.py") + ":12")) for line in inside[0]["lines"]), inside


@pytest.mark.parametrize("command, said", [
    (["torchrun", "--nproc_per_node=2", "-m", "pkg.train"], "doctor runs torchrun with a script file"),
    (["torchrun", "--nproc_per_node=2", "no_such_script.py"], "no_such_script.py: no such script"),
    (["accelerate", "launch", "train.py"], "`accelerate launch` is not supported by doctor yet"),
    (["python", "-c", "print(1)"], "`python -c` is not supported"),
    (["bash", "train.sh"], "neither python nor a .py file"),
    ([], "give the job to run after --"),
    (["python", "no_such_script.py"], "no_such_script.py: no such script"),
])
def test_commands_doctor_cannot_run_are_refused_in_one_line(command, said):
    with pytest.raises(WorkbookError, match=said.replace("(", r"\(").replace(")", r"\)").replace("`", "`")):
        parse_target(command)


def test_torchrun_and_its_options_are_the_launcher_of_the_script():
    script = str(ROOT / "labs" / "09_data_parallel" / "train.py")
    target = parse_target(["torchrun", "--standalone", "--nproc-per-node", "2", script, "--steps", "14"])
    assert target.launcher == ["torchrun", "--standalone", "--nproc-per-node", "2"]
    assert target.program == [script, "--steps", "14"]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["labs", "solutions"])
def test_a_torchrun_job_is_diagnosed_rank_by_rank(capsys, variant):
    """Every rank runs under the launcher; chapter 09's lab shows its straggler and an all-reduce per micro-batch
    side by side, its solution neither."""
    script = str(ROOT / variant / "09_data_parallel" / "train.py")
    code = main(["doctor", "--device", "cpu", "--json", "--", "torchrun", "--standalone", "--nproc-per-node", "2",
                 script, "--device", "cpu", "--steps", "14"])
    out, err = capsys.readouterr()
    assert code == 0, err[-2000:]
    d = json.loads(out)
    assert len(d["ranks"]["ranks"]) == 2
    found = {f["key"] for f in d["findings"] + d["also_seen"] if f["chapter"]["number"] == "09"}
    if variant == "labs":
        assert found == {"straggler", "allreduce_rounds"} and d["ranks"]["straggler"] == 0
    else:
        assert not found and d["ranks"]["straggler"] is None


def test_a_python_with_options_and_a_module_are_understood():
    target = parse_target(["python3", "-u", "-X", "dev", "-m", "pkg.train", "--lr", "1"])
    assert target.interpreter == ["python3", "-u", "-X", "dev"]
    assert target.program == ["-m", "pkg.train", "--lr", "1"]


@pytest.mark.slow
@pytest.mark.parametrize("chapter, expected, line", [
    ("01_item_syncs", "01", "correct += float("),     # a read in the loop (and the two in the step before it)
    ("03_dataloader_workers", "03", "loader = DataLoader("),  # the DataLoader built with num_workers=0
    ("04_eager_microops", "04", None),                # a thousand ops per step
    ("06_hidden_syncs", "06", "loss.backward()"),     # syncs of the loss helpers, seen at the step's backward
])
def test_a_chapters_slow_script_is_diagnosed_as_its_chapter(capsys, chapter, expected, line):
    script = ROOT / "chapters" / chapter / "slow.py"
    code, d, err = doctor(capsys, str(script), "--device", "cpu")
    assert code == 0, err
    if expected == "04":  # on a CPU its cost is an estimate from the time per op, which a loaded machine inflates
        assert named(d, "04")["numbers"]["ops_per_step"] >= 500
        return
    # ranked by cost, which a CPU only estimates: the chapter among the first two findings, at its line
    ranked = [(f["chapter"]["number"], f["cost"]) for f in d["findings"]]
    assert expected in [number for number, _ in ranked[:2]], ranked
    if line is not None:  # the line holding that code, wherever the script's other lines put it
        number = code_line_of(script.read_text(), line)
        assert any(f"slow.py:{number}" in text for text in named(d, expected)["lines"]), named(d, expected)["lines"]
