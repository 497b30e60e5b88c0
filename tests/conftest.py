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
