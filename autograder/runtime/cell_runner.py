"""A submission's cells, run by IPython in this process: the grader's own kernel, without ZeroMQ,
so the process may fork between two cells (CONTRIBUTING.md, "How a submission's cells run").

    runner = CellRunner()
    outputs = runner.run("print(1)\\n2")   # [stream "1\\n", execute_result "2"], as nbformat dicts"""
from __future__ import annotations

import io
import os
import sys
from typing import Any, cast

from IPython.core.displayhook import DisplayHook
from IPython.core.displaypub import DisplayPublisher
from IPython.core.interactiveshell import InteractiveShell
from traitlets.config import Config

from autograder.runtime.messages import Output


class Outputs(list[Output]):
    """One cell's outputs; consecutive writes to the same stream join, as Jupyter shows them."""

    def __init__(self) -> None:
        super().__init__()
        self.clear_on_next = False   # IPython.display.clear_output(wait=True)

    def add(self, output: Output) -> None:
        if self.clear_on_next:
            self.clear()
            self.clear_on_next = False
        self.append(output)

    def stream(self, name: str, text: str) -> None:
        if self and not self.clear_on_next and self[-1]["output_type"] == "stream" and self[-1]["name"] == name:
            self[-1]["text"] += text
        else:
            self.add({"output_type": "stream", "name": name, "text": text})


class _Stream(io.TextIOBase):
    """sys.stdout / sys.stderr while a cell runs."""

    def __init__(self, name: str, runner: CellRunner):
        self.name, self._runner = name, runner

    def write(self, text: object) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if text:
            self._runner.outputs.stream(self.name, text)
        return len(text)

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:   # the process's own descriptor (it leads to /dev/null), as ipykernel's
        return 1 if self.name == "stdout" else 2

    # typeshed declares TextIOBase.encoding an attribute; at run time it is a read-only property, which this overrides
    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"


class _Publisher(DisplayPublisher):
    """display(...) and clear_output(...)."""

    def publish(self, data: dict[str, Any], metadata: dict[str, Any] | None = None, source: object = None, *,
                transient: dict[str, Any] | None = None, update: bool = False, **kwargs: object) -> None:
        _runner(self.shell).outputs.add({"output_type": "display_data", "data": data, "metadata": metadata or {}})

    def clear_output(self, wait: bool = False) -> None:
        outputs = _runner(self.shell).outputs
        if wait:
            outputs.clear_on_next = True
        else:
            outputs.clear()


class _ResultHook(DisplayHook):
    """The value of a cell's last expression: an execute_result."""

    _format: tuple[dict[str, Any], dict[str, Any]] | None

    def start_displayhook(self) -> None:
        self._format = None

    def write_output_prompt(self) -> None:
        pass

    def write_format_data(self, format_dict: dict[str, Any], md_dict: dict[str, Any] | None = None) -> None:
        self._format = (format_dict, md_dict or {})

    def finish_displayhook(self) -> None:
        if self._format:
            data, metadata = self._format
            _runner(self.shell).outputs.add({"output_type": "execute_result", "data": data, "metadata": metadata,
                                             "execution_count": self.prompt_count})


class _Shell(InteractiveShell):
    runner: CellRunner   # set by CellRunner, whose outputs the hooks above fill

    def _showtraceback(self, etype: type[BaseException], evalue: BaseException, stb: list[str]) -> None:
        self.runner.outputs.add({"output_type": "error", "ename": str(etype.__name__),
                                 "evalue": str(evalue), "traceback": list(stb)})


def _runner(shell: object) -> CellRunner:
    """The CellRunner of a hook's shell (IPython types `shell` as any InteractiveShell)."""
    return cast(_Shell, shell).runner


class CellRunner:
    """One IPython shell in this process; `run` executes a cell and returns its outputs."""

    def __init__(self) -> None:
        self.outputs = Outputs()
        settings = Config()
        settings.HistoryManager.hist_file = ":memory:"   # a file would need IPython's saving thread
        self.shell = _Shell.instance(config=settings, displayhook_class=_ResultHook, display_pub_class=_Publisher)
        self.shell.runner = self
        sys.stdin = open(os.devnull)   # input() reads nothing: no one answers a graded kernel

    def run(self, source: str) -> list[Output]:
        self.outputs = Outputs()
        saved = sys.stdout, sys.stderr
        sys.stdout, sys.stderr = _Stream("stdout", self), _Stream("stderr", self)
        try:
            self.shell.run_cell(source, store_history=True)
        finally:
            sys.stdout, sys.stderr = saved
        return list(self.outputs)
