raise SystemExit("the grader imported the submission's own checker.lab")
