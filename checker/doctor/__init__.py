"""`workbook doctor`: the workbook's rules on the learner's own training script (docs/doctor.md).

Two halves, kept apart: ``launch`` runs inside the user's process (standard library and torch only, nothing of
the workbook), ``run``, ``diagnose`` and ``command`` outside it. This file imports nothing: `python -m
checker.doctor.launch` loads it into the user's process first.
"""
