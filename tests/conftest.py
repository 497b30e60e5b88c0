"""Fixtures every test module may use, and how the tests are shared out between pytest workers."""
from pathlib import Path

import pytest
import torch
from graded_class import attacked_release, drops_to_grade, graded_course
from grading_harness import released_course, run_folder

# Torch in the pytest workers computes on one thread: the suite's 2 workers already fill the 2 cores,
# and a second intra-op thread only spins waiting for one (40 Adam steps of the toy: 15.7 CPU-s on 2
# threads, 1.9 on one). Ranks set their own count (threeaxes/launch/worker.py), kernels keep theirs.
torch.set_num_threads(1)


@pytest.fixture(scope="session")
def released(tmp_path_factory, worker_id) -> Path:
    """The course with every drop released by `make release`'s own code, made once for the
    whole run: the pytest workers share it through a folder they all see (`run_folder`), and
    the first to ask releases it."""
    return released_course(run_folder(tmp_path_factory, worker_id))


@pytest.fixture(scope="session")
def graded_class(tmp_path_factory, released):
    """The suite's one graded class, graded once through `make grade`'s own path: every drop's
    students (tests/graded_class.py), the route and page attacks on drops 1 and 4
    (tests/grading_attacks_routes.py) and the top-row students of drops 13 and 14
    (tests/top_row_students.py), each of a drop this run grades. The files that read it share
    one pytest worker (GRADED_CLASS below), so it is graded once."""
    import top_row_students
    from grading_attacks_routes import ATTACKS as ROUTE_ATTACKS

    grading = drops_to_grade()
    names = {d.name for d in grading}
    extra = {(drop, student): (lambda course, drop=drop, build=build: build(attacked_release(course, drop)))
             for drop, attacks in ROUTE_ATTACKS.items() for student, build in attacks.items()}
    extra |= top_row_students.submissions()
    # two submissions autograde at once (one course, one gradebook), as `make grade` does on 2 cores:
    # the other pytest worker fills what their waits leave of the cores. Four at once took more CPU
    # for the same class (graded alone: 456.6 CPU-s and 269 s against 388.5 CPU-s and 236 s), each
    # worker that joins a drop paying its opening again
    return graded_course(tmp_path_factory.mktemp("grading"), grading, jobs=2, released=released,
                         extra={key: build for key, build in extra.items() if key[0] in names})


# The files that read `graded_class`: one xdist group, on one worker. Every other file is a group
# of its own (as --dist loadfile keeps a file on one worker: its module fixtures run once).
GRADED_CLASS = ("test_grading.py", "test_grading_attacks_routes.py", "test_top_row_scores_half.py")

# The files that take minutes, longest first: run first, so that pytest-xdist's workers
# share out the many short files at the end instead of one worker finishing a long file
# alone ("keep slow work off the tail"). Order within a file is kept.
LONG_FIRST = ("test_grading.py", "test_hub_class.py", "test_grade_script.py", "test_attacks_beside_and_oracle.py",
              "test_exchange_accounts.py", "test_forbidden_routes.py", "test_student_walk.py", "test_exchange.py",
              "test_jupyterlab_session.py", "test_train_torchrun.py", "test_colab.py", "test_install_cell.py",
              "test_widgets.py", "test_grade_workers.py", "test_sharding_ranks.py", "test_inert_pages.py",
              "test_sandbox_escapes.py", "test_hub.py")


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist's own, which reads the groups to share out the tests
def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = item.path.name
        return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)
    items[:] = sorted(items, key=rank)     # a stable sort: the rest keep their order
    for item in items:   # pytest-xdist's --dist loadgroup (the Makefile's) sends each group to one worker
        group = "graded-class" if item.path.name in GRADED_CLASS else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(group))
