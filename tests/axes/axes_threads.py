"""Torch in the test process on one thread, for the module that imports `one_torch_thread`
(an autouse fixture: importing it is enough).

The suite's 2 pytest workers already fill the 2 cores; torch's second intra-op thread only
spins waiting for a core (40 Adam steps of the toy: 15.7 CPU-s on 2 threads, 1.9 s on one).
Ranks set their own count (threeaxes.launch.worker). Not a conftest.py: a second conftest
module would replace the `conftest` that tests/repo/test_suite_schedule.py imports.
"""
import pytest
import torch


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    # module scope, autouse: set before the module's own module-scoped fixtures (its launches
    # and one-process references) run; put back after the module
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
