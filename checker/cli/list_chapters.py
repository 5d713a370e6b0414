"""`workbook list`: the chapters, with the learner's progress in each."""

from __future__ import annotations

import argparse
import json

from checker.base.chapters import all_chapters
from checker.base.paths import display_path


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
