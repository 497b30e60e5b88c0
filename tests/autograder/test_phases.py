"""Each second of a submission's grading counts once, in the phase it was spent in
(autograder/phases.py), and the class's table adds them up."""
import time

import pytest

from autograder import phases


def test_a_nested_phase_is_taken_out_of_the_one_around_it():
    phases.take()
    with phases.timed("setup"):
        time.sleep(0.05)
        with phases.timed("fork"):
            time.sleep(0.1)
    spent = phases.take()
    assert set(spent) == {"setup", "fork"}
    assert 0.1 <= spent["fork"] < 0.2
    assert 0.05 <= spent["setup"] < 0.1          # 0.15 s in all, the fork's 0.1 s not in it
    assert phases.take() == {}                   # taken: the count starts again


def test_inside_quiet_everything_counts_to_the_phase_around_it():
    phases.take()
    with phases.timed("cell limits"), phases.quiet():
        with phases.timed("student cells"):
            time.sleep(0.05)
    spent = phases.take()
    assert set(spent) == {"cell limits"} and spent["cell limits"] >= 0.05


def test_an_unknown_phase_is_refused_with_the_known_ones():
    with pytest.raises(ValueError, match="student cells"):
        phases.add("students", 1.0)


def test_the_table_sums_each_phase_over_the_class():
    rows = [{"fork": 1.0, "student cells": 3.0}, {"fork": 2.0, "nbgrader": 6.0}]
    table = phases.table(rows, wall_s=60, jobs=2)
    fork = next(line for line in table.splitlines() if line.split()[0] == "fork")
    assert fork.split()[1:5] == ["3.0", "s", "25.0%", "1.50"]      # 3 of 12 s; 3 s over 2 submissions
    assert "2.0 submissions a minute" in table


def test_the_grader_counts_what_the_worker_did_not_as_its_own_side():
    from autograder.apps.grade.pool import phases_of as _phases

    # 7 s from handing the submission over to its answer; the worker accounts for 5.5 s of it
    said = {"phases": {"worker start": 2.0, "fork": 0.5, "nbgrader": 3.0, "odd": "x"}}
    spent = _phases(said, 7.0)
    assert spent == {"worker start": 2.0, "fork": 0.5, "nbgrader": 3.0, "grader side": 1.5}
    assert _phases({}, 0.25) == {"grader side": 0.25}      # a refusal or a dead worker: no phases
