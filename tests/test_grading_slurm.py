"""`workbook grade --slurm` on a real one-node Slurm cluster (slurmctld + slurmd, CPU only), started here.

Skipped, with the reason, where Slurm cannot run (not root, or slurm-wlm and munge not installed: CI installs
them with `apt-get install -y slurm-wlm munge`); either way the test says on the terminal whether it ran.
"""

import pytest

import slurm_cluster
from checker.grading import ledger
from gradinglib import GOOD, RAISES, WRONG, grade_env, make_class, make_tiny_root, run_grade, verdict_columns

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory, pytestconfig):
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")

    def say(line: str) -> None:  # on the terminal even when pytest captures output: CI's log shows it
        with capture.global_and_fixture_disabled():
            print(line, flush=True)

    reason = slurm_cluster.why_unavailable()
    if reason:
        say(f"\nSlurm test NOT run: {reason}")
        pytest.skip(reason)
    folder = tmp_path_factory.mktemp("slurm")
    try:
        env = slurm_cluster.up(folder)
    except Exception as err:  # noqa: BLE001 - a cluster that will not start is a reason to skip, said aloud
        say(f"\nSlurm test NOT run: the one-node cluster did not start ({err})")
        pytest.skip(f"the one-node Slurm cluster did not start: {err}")
    say(f"\nSlurm test runs on a real one-node cluster (slurmctld + slurmd), SLURM_CONF={env['SLURM_CONF']}")
    yield env
    slurm_cluster.down(folder)


def test_a_class_graded_through_slurm_matches_a_local_run(cluster, tmp_path):
    root = make_tiny_root(tmp_path)
    submissions = make_class(tmp_path / "class", {"ann": GOOD, "bob": WRONG, "cat": RAISES, "dan": None})
    env = grade_env(root, **cluster)
    local = run_grade("90", submissions, tmp_path / "local", "--device", "cpu", root=root, env=env)
    assert local.returncode == 3, local.stderr

    out = tmp_path / "slurm"
    slurm = run_grade("90", submissions, out, "--device", "cpu", "--slurm", "--wait", root=root, env=env)
    assert slurm.returncode == 3, slurm.stderr + slurm.stdout
    assert "submitted Slurm job" in slurm.stderr and "4 array task(s)" in slurm.stderr
    assert verdict_columns(out / "gradebook.csv") == verdict_columns(tmp_path / "local" / "gradebook.csv")
    records = ledger.read_records(out / "ledger.jsonl")
    assert sorted(r["student"] for r in records) == ["ann", "bob", "cat", "dan"]
    assert all(r["worker"].startswith("slurm ") for r in records)
    script = next((out / "slurm").glob("*/grade.sbatch")).read_text()
    assert "#SBATCH --array=0-3" in script and "--gres" not in script  # CPU: no GPU asked for

    (out / "gradebook.csv").unlink()  # --collect rebuilds it from the ledger alone
    collected = run_grade("90", submissions, out, "--device", "cpu", "--collect", root=root, env=env)
    assert collected.returncode == 3 and verdict_columns(out / "gradebook.csv") == verdict_columns(
        tmp_path / "local" / "gradebook.csv")
    again = run_grade("90", submissions, out, "--device", "cpu", "--slurm", root=root, env=env)
    assert "nothing to grade" in again.stderr and len(ledger.read_records(out / "ledger.jsonl")) == 4
