"""Class grading (`workbook grade`): a resumable ledger, a gradebook and feedback per student, workers per GPU
or Slurm tasks. ``classroom.py`` plans and runs a class; each student is graded by ``task.py`` in a process
of its own, through the grader (``checker.grader``)."""
