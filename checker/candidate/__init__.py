"""Everything in this package runs inside the candidate's process, and the grader trusts none of it.

A script being graded can replace any of it (patch the clock, fake a step, rewrite what is sent back), so
nothing here decides a verdict. It only does the run's side of the protocol with the grader
(``checker.grader.runs``): it reports when each step starts and when the timed window opens and closes, receives
the run's secrets, re-draws the model's head from the window key, and sends the trained weights back over
the channel the grader made. The grader stamps every message on its own clock and checks the weights in a
process of its own (``checker.grader.referee``). docs/trust.md says why each
number can be believed.
"""
