"""The CPU speed floor of launches_per_step and elementwise_kernels (session 58): the traced pair's windows of
chapters 04 and 05's solution and lab, checked several times, and of red team 22's submissions with the scan off.

    python evidence/made-by/speed_floor_cpu.py ROUNDS OUT.jsonl OUT.md [NAME=PATH ...]

Each row is one `workbook check NN --device cpu --json` (WORKBOOK_SCAN=0 for a submission); the table gives, per
script, the traced steps' time against the slow script's (traced_slower_by) over the rounds, and the counts.
"""

import datetime
import json
import os
import platform
import statistics
import subprocess
import sys

import torch

CHECK = {"04": "launches_per_step", "05": "elementwise_kernels"}


def run(chapter, target):
    scan = "0" if target[0] == "--submission" else "1"
    proc = subprocess.run([sys.executable, "-m", "checker", "check", chapter, *target, "--device", "cpu", "--json"],
                          capture_output=True, text=True, env={**os.environ, "WORKBOOK_SCAN": scan})
    report = json.loads(proc.stdout)
    check = next(c for c in report["checks"] if c["name"] == CHECK[chapter])
    return {"exit_code": proc.returncode, "passed": report["passed"], "check": check["name"], "status": check["status"],
            "measured": check.get("measured", {}), "scan": int(scan)}


def main():
    rounds, jsonl, md, *extra = sys.argv[1:]
    items = [(f"{c}:{v}", c, ["--variant", v]) for c in ("04", "05") for v in ("solution", "lab")]
    for spec in extra:
        name, path = spec.split("=", 1)
        items.append((name, name[-2:], ["--submission", path]))
    head = {"machine": f"CPU: {os.cpu_count()} cores", "torch": torch.__version__, "python": platform.python_version(),
            "date": datetime.date.today().isoformat()}
    rows = []
    for r in range(int(rounds)):
        for name, chapter, target in items:
            if r and target[0] == "--submission":
                continue  # a submission once: the rounds measure the honest scripts' spread
            row = {**head, "script": name, "round": r + 1, **run(chapter, target)}
            rows.append(row)
            print(name, row["status"], row["measured"].get("traced_slower_by"), flush=True)
    with open(jsonl, "w") as out:
        out.writelines(json.dumps(row) + "\n" for row in rows)
    lines = [f"# The CPU speed floor of chapters 04 and 05 ({head['date']}, {head['machine']}, torch {head['torch']})", "",
             f"Made by `evidence/made-by/speed_floor_cpu.py` from `{os.path.basename(jsonl)}`: the candidate's traced steps "
             "against the slow script's on the grader's clock (traced_slower_by), and the counts (top level, any depth).", "",
             "| script | checks | verdicts | traced_slower_by (min, median, max) | fewer by (top) | fewer by (any depth) |",
             "|---|---|---|---|---|---|"]
    for name, *_ in items:
        mine = [row for row in rows if row["script"] == name]
        slower = [row["measured"].get("traced_slower_by") for row in mine if row["measured"].get("traced_slower_by")]
        top = mine[0]["measured"].get("launches_fewer_by", mine[0]["measured"].get("elementwise_fewer_by"))
        spread = f"{min(slower):.2f}, {statistics.median(slower):.2f}, {max(slower):.2f}" if slower else "-"
        verdicts = ", ".join(sorted({row["status"] for row in mine}))
        lines.append(f"| {name} | {len(mine)} | {verdicts} | {spread} | {top} | {mine[0]['measured'].get('any_depth_fewer_by')} |")
    open(md, "w").write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
