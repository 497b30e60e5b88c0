"""The commands, one module each (`python -m autograder.apps.<name>`): the instructor's,
and `workspace`, the student's `make lab`.
"""
