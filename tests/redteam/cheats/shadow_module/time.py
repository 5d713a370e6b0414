# A decoy, not a test: the red-team cheat ships it beside train.py to check that no module beside the lab can shadow a standard one (the grader copies train.py alone).
raise SystemExit("the grader imported the submission's own time module")
