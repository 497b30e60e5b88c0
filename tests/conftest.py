"""Fixtures every test module may use."""
from pathlib import Path

import pytest
from grading_harness import released_course


@pytest.fixture(scope="session")
def released(tmp_path_factory, worker_id) -> Path:
    """The course with every drop released by `make release`'s own code, made once for the
    whole run: the pytest workers share it through a folder they all see (the parent of
    each worker's base temp), and the first to ask releases it."""
    base = tmp_path_factory.getbasetemp()
    shared = base if worker_id == "master" else base.parent
    return released_course(shared)


# The files that take minutes, longest first: run first, so that pytest-xdist's workers
# share out the many short files at the end instead of one worker finishing a long file
# alone ("keep slow work off the tail"). Order within a file is kept.
LONG_FIRST = ("test_grading.py", "test_hub_class.py", "test_jupyterlab_session.py", "test_grade_script.py",
              "test_exchange_accounts.py", "test_exchange.py", "test_colab.py", "test_sandbox_escapes.py",
              "test_install_cell.py", "test_hub.py")


def pytest_collection_modifyitems(session, config, items):
    def rank(item):
        name = item.path.name
        return LONG_FIRST.index(name) if name in LONG_FIRST else len(LONG_FIRST)
    items[:] = sorted(items, key=rank)     # a stable sort: the rest keep their order
