"""threeaxes.launch's output: each line a rank prints comes back prefixed with its rank, while
the rank still runs, in a notebook cell too; a rank's traceback shows source only the caller
knows.

Rank functions here are pickled by value (as notebook functions are), so the
workers never import this test module.
"""

import sys
import time

import cloudpickle
import pytest
from launch_helpers import ROOT

from threeaxes.launch import RankError, launch

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def test_output_is_prefixed_with_its_rank(capsys):
    def chatty(rank, world_size):
        print(f"hello from {rank}\nsecond line {rank}")
        sys.stderr.write(f"warning from {rank}\n")
        print("no newline at the end", end="")
        return rank

    assert launch(chatty, 2) == [0, 1]
    out, err = capsys.readouterr()
    for rank in (0, 1):
        assert f"[rank {rank}] hello from {rank}\n" in out
        assert f"[rank {rank}] second line {rank}\n" in out
        assert f"[rank {rank}] no newline at the end\n" in out
        assert f"[rank {rank}] warning from {rank}\n" in err
        assert f"warning from {rank}" not in out


class _Recorder:
    """A stand-in for sys.stdout that, on seeing `trigger`, creates `flag`."""

    def __init__(self, trigger, flag):
        self.trigger, self.flag, self.text = trigger, flag, ""

    def write(self, text):
        self.text += text
        if self.trigger in text:
            self.flag.write_text("seen")
        return len(text)

    def flush(self):
        pass


def test_output_arrives_while_the_rank_is_still_running(tmp_path, monkeypatch):
    # Rank 0 can only finish once the caller has printed its first line: if output
    # were held back until the end, it would wait forever and the launch would time out.
    flag = tmp_path / "seen"

    def waits_for_its_own_output(rank, world_size):
        print("early")
        deadline = time.monotonic() + 20
        while not flag.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        print("late")
        return flag.exists()

    recorder = _Recorder("[rank 0] early", flag)
    monkeypatch.setattr(sys, "stdout", recorder)
    assert launch(waits_for_its_own_output, 1, timeout=30) == [True]
    assert recorder.text == "[rank 0] early\n[rank 0] late\n"


def test_tracebacks_show_source_only_the_caller_knows():
    # Notebook cells live only in the kernel's linecache; the ranks cannot show their source.
    filename = "<cell-only-in-this-process>"
    source = "def from_a_cell(rank, world_size):\n    raise KeyError('from a cell')\n"
    namespace = {}
    exec(compile(source, filename, "exec"), namespace)
    import linecache

    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    try:
        with pytest.raises(RankError) as info:
            launch(namespace["from_a_cell"], 1)
    finally:
        del linecache.cache[filename]
    assert f'File "{filename}", line 2, in from_a_cell\n    raise KeyError(\'from a cell\')' in str(info.value)


@pytest.mark.slow  # a fresh Python (and torch import) per test
def test_a_notebook_cell_shows_every_ranks_output():
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [
        f"import sys; sys.path.insert(0, {str(ROOT)!r})",
        "import sys\nfrom threeaxes.launch import launch, RankError\n"
        "def hello(rank, world_size):\n"
        "    print(f'hello from {rank}')\n"
        "    print(f'careful from {rank}', file=sys.stderr)\n"
        "    return rank * 10\n"
        "print(launch(hello, 2))",
        "def broken(rank, world_size):\n"
        "    if rank == 1:\n"
        "        raise ValueError('broken on purpose')\n"
        "    return rank\n"
        "try:\n    launch(broken, 2)\nexcept RankError as exc:\n    print('CAUGHT', exc)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                            resources={"metadata": {"path": str(ROOT)}}).execute()

    def stream(cell, name):
        return "".join(o.get("text", "") for o in cell.outputs if o.get("name") == name)

    hello, broken = nb.cells[1], nb.cells[2]
    assert "[rank 0] hello from 0\n" in stream(hello, "stdout")
    assert "[rank 1] hello from 1\n" in stream(hello, "stdout")
    assert "[0, 10]" in stream(hello, "stdout")
    assert "[rank 1] careful from 1\n" in stream(hello, "stderr")
    caught = stream(broken, "stdout")
    assert "CAUGHT rank 1 of 2 raised" in caught
    assert "raise ValueError('broken on purpose')" in caught  # the cell's source, shown again
