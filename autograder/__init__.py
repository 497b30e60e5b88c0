"""Instructor side of the course: regenerate release/ (`release.py`), grade
what students handed in (`grade.py`), keep hidden tests out of feedback
(`feedback.py`). Sample submissions for a dry run live in `samples/`."""
