"""First in the forkserver's preload: a Ctrl-C that reaches the server while it still
imports torch ends it quietly."""
from __future__ import annotations

import os
import signal
import sys
from types import FrameType


def in_forkserver_main() -> bool:
    """True while `multiprocessing.forkserver.main` is on the stack (its preload).

    Jupyter signals a kernel's whole process group (an interrupt, a shutdown), and the
    forkserver a kernel prestarts is in that group. Once its preload is done the server
    ignores SIGINT (``multiprocessing.forkserver.main`` sets that up): otherwise the signal
    raises KeyboardInterrupt in the middle of ``import torch`` and prints a traceback to
    the kernel's stderr whenever a kernel that never launched is shut down within its
    first seconds. Here the server exits without a word instead. The ranks it forks set
    their own handling (``worker.py`` ignores SIGINT; the launcher stops them).

    Imported anywhere but the forkserver's preload, this module changes nothing.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "main" and code.co_filename.endswith(os.path.join("multiprocessing", "forkserver.py")):
            return True
        frame = frame.f_back
    return False


if in_forkserver_main():
    signal.signal(signal.SIGINT, lambda *_: os._exit(0))
