"""Instructor side of the course: regenerate release/ (`release.py`), grade
what students handed in (`grade.py`), keep hidden tests out of feedback
(`feedback.py`), and give each student a working copy outside git's tracked
files (`workspace.py`, what `make lab` and `make reset` run). Sample
submissions for a dry run live in `samples/`."""
