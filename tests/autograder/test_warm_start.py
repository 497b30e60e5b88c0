"""A drop's opening cells run once per host; each submission's kernel is forked from there
(autograder/judging/warm_start.py, kernel_host.py, cell_runner.py)."""
import json
import subprocess
import sys

import nbformat
import pytest

from autograder.judging import warm_start
from autograder.runtime.kernel_session import ROOT, KernelHost, KernelSession

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="namespaces are Linux only")

OPENING = "import os\nx = 41\nopen('opening.txt', 'w').write('made once')\nprint('opened')"
SUBMISSION = ("import os, subprocess\nx += 1\nopen('mine.txt', 'w').write('one student')\n"
              "left = subprocess.Popen(['sleep', '300'])\n"
              "print(x, sorted(os.listdir('.')), os.getpid())")


def printed(outputs) -> str:
    return "".join(o.get("text", "") for o in outputs) + "".join(
        f"{o['ename']}: {o['evalue']}" for o in outputs if o["output_type"] == "error")


@pytest.fixture(params=[True, False], ids=["sandboxed", "not sandboxed"])
def host(request):
    if request.param and not sys.platform.startswith("linux"):
        pytest.skip("namespaces are Linux only")
    host = KernelHost(isolate=request.param)
    assert printed(host.run_cell(OPENING, 30)) == "opened\n"
    yield host
    host.close()


def test_each_kernel_starts_from_the_opening_and_leaves_nothing_to_the_next(host):
    seen = []
    for _ in range(3):
        with KernelSession(host, timeout=30) as kernel:
            seen.append(printed(kernel.run_cell(SUBMISSION, 30)).split(" [")[0])
            assert "mine.txt" in printed(kernel.run_cell("print(os.listdir('.'))", 30))
    assert seen == ["42"] * 3    # x += 1 each time, from the opening's 41: no kernel saw another's
    with KernelSession(host, timeout=30) as kernel:
        files = printed(kernel.run_cell("print(sorted(os.listdir('.')))", 30))
    assert "opening.txt" in files and "mine.txt" not in files and "kernel-" not in files


@linux
def test_a_kernel_is_the_first_process_of_its_own_and_what_it_started_ends_with_it():
    host = KernelHost(isolate=True)
    try:
        with KernelSession(host, timeout=30) as kernel:
            started = "import os, subprocess\nleft = subprocess.Popen(['sleep', '300'])\nprint(os.getpid())"
            assert printed(kernel.run_cell(started, 30)) == "1\n"   # the init of its own PID namespace
            listed = printed(kernel.run_cell("print(sorted(p for p in os.listdir('/proc') if p.isdigit()))", 30))
            assert listed.strip() == str(sorted(["1", str(2)]))                    # itself and its sleep
        with KernelSession(host, timeout=30) as kernel:
            gone = printed(kernel.run_cell("import os\nprint([p for p in os.listdir('/proc') if p.isdigit()])", 30))
        assert gone.strip() == "['1']"
    finally:
        host.close()


def test_a_host_runs_no_cell_of_its_own_once_it_has_forked():
    host = KernelHost(isolate=False)
    try:
        with KernelSession(host, timeout=30) as kernel:
            kernel.run_cell("y = 1", 30)
        assert host.run_cell("y = 2", 30)[0]["ename"] == "KernelStopped"
    finally:
        host.close()


def _notebook(*sources, answer_at=2):
    nb = nbformat.v4.new_notebook()
    for i, source in enumerate(sources):
        cell = nbformat.v4.new_code_cell(source)
        if i == answer_at:
            cell.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "answer"}
        nb.cells.append(cell)
    return nb


def test_the_opening_is_the_instructors_cells_before_the_first_answer():
    nb = _notebook("a = 1", "b = 2", "def f(): pass", "c = f()")
    assert warm_start.opening_cells(nb) == ["a = 1", "b = 2"]
    settings = dict(isolate=False, files={}, withheld=None, timeout=30)
    try:
        shared = warm_start.host_for(nb, instructors={"a = 1", "b = 2"}, **settings)
        assert [printed(o) for o in shared.outputs] == ["", ""]
        assert warm_start.host_for(nb, instructors={"a = 1", "b = 2"}, **settings) is shared
        changed = _notebook("a = 1", "b = 'mine'", "def f(): pass")
        own = warm_start.host_for(changed, instructors={"a = 1", "b = 2"}, **settings)
        assert own is not shared and own.outputs == []   # a student's cell never runs in a host
    finally:
        warm_start.close_all()


def test_the_instructors_imports_up_to_the_last_graded_code_cell_are_loaded_ahead():
    # the opening, an answer, a demo that imports, a line magic, a test cell, the depth
    nb = _notebook("x = 1", "answer = 1", "import netrc\nfrom xml.dom import minidom",
                   "%matplotlib inline\nimport tabnanny", "import sunau", "import wave", answer_at=1)
    nb.cells[4].metadata["nbgrader"] = {"solution": False, "grade": True, "grade_id": "t", "points": 1}
    # not the magic's cell (not Python), the test cell's (the grader's) or the depth's (never run)
    assert warm_start.imported_modules(nb) == ("netrc", "xml.dom", "xml.dom.minidom")
    loaded = "import sys\nprint(sorted(m for m in ('netrc', 'xml.dom.minidom', 'wave') if m in sys.modules))"
    settings = dict(isolate=False, files={}, withheld=None, timeout=30)
    try:
        ahead = warm_start.host_for(nb, instructors={"x = 1"},
                                    imports=warm_start.imported_modules(nb) + ("no_such_module",), **settings)
        with ahead.session(30) as kernel:        # loaded, though no cell of the kernel imported them
            assert printed(kernel.run_cell(loaded, 30)) == "['netrc', 'xml.dom.minidom']\n"
            assert printed(kernel.run_cell("print('netrc' in dir(), x)", 30)) == "False 1\n"   # nothing bound
        plain = warm_start.host_for(nb, instructors={"x = 1"}, **settings)
        assert plain is not ahead
        with plain.session(30) as kernel:
            assert printed(kernel.run_cell(loaded, 30)) == "[]\n"
    finally:
        warm_start.close_all()


def test_outputs_are_those_a_jupyter_kernel_gives():
    """The same cells through ipykernel (nbclient) and through the grader's own shell."""
    from nbclient import NotebookClient

    cells = ["print('a')\nprint('b')\n2 + 3",
             "import sys\nprint('x', file=sys.stderr)\nfrom IPython.display import display, HTML\n"
             "display(HTML('<b>bold</b>'))\n'last'",
             "def f():\n    return {'k': [1, 2]}\nf()",
             "1 / 0",
             "x = 5;",
             "from IPython.display import clear_output\nprint('gone')\nclear_output()\nprint('kept')"]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    NotebookClient(nb, kernel_name="python3", allow_errors=True, timeout=60).execute()
    # the shell in a process of its own: it would be this one's get_ipython() for the tests after
    script = ("import json, sys\nfrom autograder.runtime.cell_runner import CellRunner\nrunner = CellRunner()\n"
              "print(json.dumps([runner.run(c) for c in json.loads(sys.argv[1])]))")
    ours = json.loads(subprocess.run([sys.executable, "-c", script, json.dumps(cells)], cwd=ROOT, check=True,
                                     capture_output=True, text=True).stdout)

    def plain(outputs):
        return [{k: v for k, v in o.items() if k not in ("traceback", "metadata", "execution_count")}
                for o in outputs]

    for cell, outputs in zip(nb.cells, ours):
        assert plain(outputs) == plain(cell.outputs), cell.source


def test_a_kernel_that_forges_its_replies_is_stopped_and_the_host_goes_on():
    """The host reads a kernel's replies as data: a line that is not one ends that kernel."""
    host = KernelHost(isolate=False)
    forge = ("import os\nfor fd in range(3, 256):\n    try:\n        os.write(fd, b'not a reply\\n')\n"
             "    except OSError:\n        pass")
    try:
        with KernelSession(host, timeout=30) as kernel:
            kernel.run_cell(forge, 30)
            assert kernel.run_cell("print(1)", 30)[0]["ename"] == "KernelStopped"
        with KernelSession(host, timeout=30) as kernel:
            assert printed(kernel.run_cell("print('next')", 30)) == "next\n"
    finally:
        host.close()


IMPORTS_LAUNCH = "from threeaxes.launch import launch\ndef world(rank, size):\n    return size\n"
SERVER = ("import multiprocessing.forkserver as f, os\nserver = f._forkserver._forkserver_pid\n"
          "print(server, open(f'/proc/{server}/cmdline', 'rb').read() == open('/proc/self/cmdline', 'rb').read())")


@linux
@pytest.mark.parametrize("opening_launches", [True, False], ids=["opening launches", "opening imports launch"])
def test_where_the_opening_imported_launch_each_kernel_has_its_own_forkserver_forked_from_it(opening_launches):
    """Not the host's (that one is the opening's), and not a fresh interpreter that imports
    torch again on the first launch: a fork of the kernel, made before the student's code ran."""
    host = KernelHost(isolate=True)
    try:
        opened = printed(host.run_cell(IMPORTS_LAUNCH + ("print(launch(world, 2))" if opening_launches else ""), 60))
        assert opened == ("[2, 2]\n" if opening_launches else "")
        assert host.request({"warm": True}, 60) == {"warmed": True}
        servers = []
        for _ in range(2):
            with KernelSession(host, timeout=60) as kernel:
                pid, forked = printed(kernel.run_cell(SERVER, 30)).split()
                assert forked == "True" and pid != "None"
                assert printed(kernel.run_cell("print(launch(world, 2))", 60)) == "[2, 2]\n"
                servers.append(pid)
        assert servers[0] == servers[1] == "2"   # in each kernel's own PID namespace, its first child
    finally:
        host.close()


@linux
@pytest.mark.parametrize("isolate", [True, False], ids=["sandboxed", "not sandboxed"])
def test_the_openings_own_launch_has_a_forkserver_forked_from_the_host(isolate):
    """The opening cells' first launch: a server forked from the host, which holds torch and the
    ranks' modules already, not a fresh interpreter that imports them again."""
    host = KernelHost(isolate=isolate)
    try:
        assert printed(host.run_cell(IMPORTS_LAUNCH + "print(launch(world, 2))", 60)) == "[2, 2]\n"
        pid, forked = printed(host.run_cell(SERVER, 30)).split()
        assert pid != "None" and forked == "True", (pid, forked)
        assert printed(host.run_cell("print(launch(world, 3))", 60)) == "[3, 3, 3]\n"
    finally:
        host.close()
