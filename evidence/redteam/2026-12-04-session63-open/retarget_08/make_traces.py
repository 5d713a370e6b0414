"""RED TEAM (rt33): chapter 08's diagnosis without running any of my jobs.

The published practice traces (solutions/08_triage/profiles/cpu-job-*.json.gz) are one honest measurement of one
job of each design. My jobs have the same code and, per design, the same structure (the kernel design always has one
block; here my data job has one block and my launch job 14, as the practice ones do); they differ only in their
sizes, which the job's code gives (workload.job_settings). So each practice trace is retargeted: every "Input Dims"
size that is one of the practice job's sizes (rows, tokens, batch, width, hidden) is replaced by mine. Times are left
as measured on the practice job; the answer quotes what the retargeted trace reads."""
import gzip
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "chapters/08_triage"))
sys.path.insert(0, str(ROOT))
from workload import job_settings  # noqa: E402  (the sizes, read from the job's code)

PRACTICE = {"kernel": ("a", 4020554), "overhead": ("b", 2198418), "data": ("c", 3865646)}
MINE = {"a": 2000233, "b": 4241215, "c": 8190604}  # `workbook assign 08` for learner rt33-11


def design(s):  # the design is the first draw of the code; its ranges tell it apart
    return "data" if s["rounds"] >= 100 else "overhead" if s["blocks"] >= 10 else "kernel"


def sizes(s):
    return {"batch": s["batch"], "tokens": s["tokens"], "rows": s["batch"] * s["tokens"], "width": s["width"],
            "hidden": s["hidden"]}


def remap(value, mapping):
    if isinstance(value, list):
        return [remap(v, mapping) for v in value]
    return mapping.get(value, value) if isinstance(value, int) and not isinstance(value, bool) else value


answer = ['device = "cpu"', ""]
from checker.checks.triage import measure  # noqa: E402  (what `workbook report` prints)
from checker.trace import load  # noqa: E402

walls = {}
for job, code in MINE.items():
    mine = job_settings(code, "cpu")
    kind = design(mine)
    letter, pcode = PRACTICE[kind]
    theirs = job_settings(pcode, "cpu")
    assert theirs["blocks"] == mine["blocks"], (job, theirs, mine)
    old, new = sizes(theirs), sizes(mine)
    mapping = {old[k]: new[k] for k in old}
    assert len(mapping) == len(old), "practice sizes collide"
    data = json.load(gzip.open(ROOT / f"solutions/08_triage/profiles/cpu-job-{letter}.json.gz"))
    for e in data["traceEvents"]:
        dims = (e.get("args") or {}).get("Input Dims")
        if dims:
            e["args"]["Input Dims"] = remap(dims, mapping)
    # each sample's torch.from_numpy runs one aten::lift_fresh: a job with a smaller batch runs fewer per step
    surplus = theirs["batch"] - mine["batch"]
    if surplus > 0:
        steps = [(e["ts"], e["ts"] + e["dur"]) for e in data["traceEvents"]
                 if e.get("cat") == "user_annotation" and str(e.get("name", "")).startswith("step ")]
        drop = set()
        for lo, hi in steps:
            per_sample = [i for i, e in enumerate(data["traceEvents"]) if e.get("name") == "aten::lift_fresh"
                          and lo <= e["ts"] <= hi and e["args"].get("Input Dims") == [[mine["tokens"], 32]]]
            drop.update(per_sample[:surplus])
        data["traceEvents"] = [e for i, e in enumerate(data["traceEvents"]) if i not in drop]
    out = Path(__file__).parent / f"profiles/lab-torch-job-{job}.json.gz"
    with gzip.open(out, "wt") as f:
        json.dump(data, f)
    m = measure(load(out), "cpu")
    walls[job] = kind
    answer += [f"[jobs.{job}]", f'wall = "{kind}"', f'trace = "profiles/{out.name}"',
               f"data_wait = {m['data_wait']}", f"ops_per_step = {m['ops_per_step']}", ""]
    print(job, kind, "from practice", letter, mapping, m)
fix = next(j for j, k in walls.items() if k == "data")
answer += ["[fix]", f'job = "{fix}"', ""]
(Path(__file__).parent / "answer.toml").write_text("\n".join(answer))
