"""The device plans (evidence/plans/*.env): every item names what exists, so that no GPU minute goes to a typo."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from checker.base.chapters import get_chapter

ROOT = Path(__file__).resolve().parent.parent
PLANS = sorted((ROOT / "evidence" / "plans").glob("*.env"))
TOOLS = {"torch", "nsys", "torch+ncu", "nsys+ncu"}


def plan_items(path: Path) -> list[str]:
    """PLAN's and PLAN_H200's items, as scripts/gpu_verify.sh sees them (the file sourced by bash)."""
    shown = subprocess.run(["bash", "-c", 'set -a; . "$1"; printf "%s\n%s\n" "${PLAN:-}" "${PLAN_H200:-}"', "-", path],
                           capture_output=True, text=True, check=True).stdout
    return shown.split()


@pytest.mark.parametrize("plan", PLANS, ids=lambda p: p.stem)
def test_every_plan_item_names_a_chapter_a_variant_or_cheat_and_a_tool(plan):
    for item in plan_items(plan):
        item, _, assign = item.partition("@")
        assert not assign or re.fullmatch(r"[A-Z_]+=\S+", assign), f"{plan.name}: {item}@{assign}"
        kind, *fields = item.split(":")
        if kind == "check":
            chapter, variant, tool, *only = fields
            assert variant in ("solution", "lab", "slow"), f"{plan.name}: {item}: unknown variant"
        elif kind == "cheat":
            path, chapter, tool, *only = fields
            assert (ROOT / "tests" / "redteam" / path / "train.py").is_file(), f"{plan.name}: {item}: no such cheat"
        else:
            pytest.fail(f"{plan.name}: {item}: an item is check:... or cheat:...")
        found = get_chapter(chapter)
        assert tool in TOOLS, f"{plan.name}: {item}: unknown tool"
        names = {spec.name for spec in found.checks}
        for name in (only[0].split(",") if only else []):
            assert name in names, f"{plan.name}: {item}: chapter {found.id} has no check {name}"
