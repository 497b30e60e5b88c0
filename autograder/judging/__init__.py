"""Judging on top of the runtime: test cells run in the grader, the oracle, the guard,
the warm opening, each cell's time limit.
"""
