"""pytest plugin (registered by entry point): `pytest chapters/01_item_syncs` runs that chapter's checks.

Each [[checks]] entry of chapter.toml becomes one test item; the runs they share are made once per chapter.
Options: --workbook-variant lab|solution|slow, --workbook-submission DIR, --workbook-device cpu|cuda,
--workbook-trace-tool torch|nsys.
"""

from __future__ import annotations

import pytest


def pytest_addoption(parser):
    group = parser.getgroup("workbook", "GPU training-performance workbook")
    group.addoption("--workbook-variant", default="lab", choices=("lab", "solution", "slow"),
                    help="which script of the chapter to grade (default: lab)")
    group.addoption("--workbook-submission", default=None, help="grade the lab file inside this folder instead")
    group.addoption("--workbook-device", default=None, choices=("cpu", "cuda"), help="default: cuda when available")
    group.addoption("--workbook-trace-tool", default="torch", choices=("torch", "nsys"))


def pytest_collect_file(file_path, parent):
    if file_path.name == "chapter.toml" and file_path.parent.parent.name == "chapters":
        return ChapterFile.from_parent(parent, path=file_path)
    return None


class CheckFailed(Exception):
    pass


class ChapterFile(pytest.File):
    def collect(self):
        from checker.base.chapters import get_chapter

        self.chapter = get_chapter(self.path.parent.name)
        self._report = None
        self._error = None
        for spec in self.chapter.checks:
            yield CheckItem.from_parent(self, name=spec.name)

    def report(self):
        if self._report is None and self._error is None:
            from checker.base.errors import WorkbookError
            from checker.grader.evaluate import evaluate

            options = self.config.option
            try:
                self._report = evaluate(
                    self.chapter,
                    variant=options.workbook_variant,
                    submission=options.workbook_submission,
                    device=options.workbook_device,
                    trace_tool=options.workbook_trace_tool,
                )
            except WorkbookError as err:
                self._error = str(err)
        if self._error is not None:
            raise CheckFailed(self._error)
        return self._report


class CheckItem(pytest.Item):
    def runtest(self):
        report = self.parent.report()
        outcome = next(c for c in report.checks if c.name == self.name)
        if outcome.status == "skipped":
            pytest.skip(outcome.reason)
        if outcome.status == "failed":
            lines = [f"{outcome.name}: {outcome.doc}", *(f"  - {e}" for e in outcome.evidence)]
            if outcome.hint:
                lines.append("hint: " + " ".join(outcome.hint.split()))
            raise CheckFailed("\n".join(lines))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, CheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self):
        return self.path, None, f"{self.parent.path.parent.name}::{self.name}"
