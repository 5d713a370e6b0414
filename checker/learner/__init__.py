"""The learner's loop: progress per chapter, hints, the solution after a pass, watch mode, and the text a
person reads of a report. Changes here change what a learner sees, never a verdict."""
