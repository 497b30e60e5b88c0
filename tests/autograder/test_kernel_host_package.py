"""Which `threeaxes` a kernel host's kernels import (kernel_host._package_seen), said in words
whatever is first on the path: the grader refuses a run on anything but "withheld"."""
import sys

import pytest

from autograder.runtime import kernel_host

MARKER = "WITHHELD-TEST-MARKER"


@pytest.fixture
def first_on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "threeaxes", raising=False)   # find_spec reads sys.modules first
    return tmp_path


def test_a_package_holding_the_marker_is_the_withheld_copy(first_on_path):
    (first_on_path / "threeaxes").mkdir()
    (first_on_path / "threeaxes" / "__init__.py").write_text("")
    (first_on_path / "threeaxes" / MARKER).write_text("")
    assert kernel_host._package_seen(MARKER) == "withheld"


def test_a_package_without_the_marker_is_named_by_its_folder(first_on_path):
    (first_on_path / "threeaxes").mkdir()
    (first_on_path / "threeaxes" / "__init__.py").write_text("")
    assert kernel_host._package_seen(MARKER) == f"imported from {first_on_path / 'threeaxes'}"


def test_a_module_named_threeaxes_is_named_by_its_file_not_a_crash(first_on_path):
    # a module has no submodule_search_locations (None): list(None) raised a TypeError that
    # ended the host, and the grader said only that no kernel started
    (first_on_path / "threeaxes.py").write_text("")
    assert kernel_host._package_seen(MARKER) == f"imported from {first_on_path / 'threeaxes.py'}"
