"""`workbook doctor` on the GPUs, as one table: what scripts/doctor_verify.sh recorded on each kind.

    python scripts/doctor_table.py evidence/history/A-doctor-verify.json [B-doctor-verify.json ...] \
        --out docs/results/doctor-gpu.md

Each input is one run of scripts/doctor_verify.sh (its GPU, driver, torch and date, and one row per script with the
claim it checked). The page shows the runs side by side: per script, the claim, and on each GPU whether it held, the
wall doctor decided and the chapters of its findings, most costly first.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def render(sources: list[tuple[str, dict]]) -> str:
    """The table of the recorded runs, `sources` being (file name, its JSON) in the order the columns take."""
    lines = ["Rendered by `scripts/doctor_table.py` from the runs of `scripts/doctor_verify.sh` named below. Claims: on "
             "a chapter's slow script doctor names that chapter among its findings (07: several chapters); on its "
             "solution no finding of that chapter is left (07: fewer findings than its slow script); on chapter 08's "
             "practice jobs the wall is the job's design.", ""]
    for name, data in sources:
        held = sum(row["ok"] for row in data["rows"])
        lines.append(f"- **{data['gpu']}** (driver {data['driver']}, torch {data['torch']}, {data['date']}): "
                     f"{held} of {len(data['rows'])} claims held (`evidence/history/{name}`)")
    lines += ["", "| run | claim | " + " | ".join(data["gpu"] for _, data in sources) + " |",
              "|---|---|" + "---|" * len(sources)]
    runs = list(dict.fromkeys(row["run"] for _, data in sources for row in data["rows"]))
    for run in runs:
        cells, claim = [], ""
        for _, data in sources:
            row = next((row for row in data["rows"] if row["run"] == run), None)
            if row is None:
                cells.append("not run")
                continue
            claim = claim or row.get("claim", "")
            named = ", ".join(row.get("chapters", [])) or "none"
            cells.append(f"{'held' if row['ok'] else '**missed**'}: {row.get('wall')}; {named}")
        lines.append(f"| {run} | {claim} | " + " | ".join(cells) + " |")
    lines += ["", "Each cell: whether the claim held, the wall doctor decided (data, overhead = launch-bound, kernel), "
              "and the chapters of its findings, most costly first."]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sources", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.write_text(render([(path.name, json.loads(path.read_text())) for path in args.sources]))


if __name__ == "__main__":
    main()
