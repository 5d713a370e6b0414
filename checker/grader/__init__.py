"""The grader: what decides a verdict, in four steps (docs/authors/architecture.md).

* plan (``plan.py``; ``assignment.py`` draws a diagnosis chapter's jobs): which runs the chapter's checks need,
  from what each check declares;
* runs (``pairs.py``, then ``runs.py`` through ``sandbox.py``): baseline and candidate in pairs under one secret,
  every process the grader starts in private and isolated;
* evidence (``gather.py``, with ``collect.py``): the grader's clock readings, the traces it believes and the
  referee's verdicts (``referee.py``, a fresh process), frozen into one ``checker.checks.evidence.Evidence``;
* checks (``checker.checks``): pure functions of that evidence.

``evaluate.py`` runs the four steps for one candidate; ``baseline.py`` shares the slow script's speed across a
grading worker's students; ``scan.py`` and ``precheck.py`` look at a candidate's source before it runs.
Nothing in this folder runs inside a candidate's process.
"""
