"""The JSON lines between the grader (autograder/runtime/kernel_session.py) and a kernel host
(autograder/runtime/kernel_host.py), as types: the settings a host starts with, the report of
its sandbox, a cell's request and reply. Types only; the host still reads what it is sent as data."""
from __future__ import annotations

from typing import Any, Literal, TypedDict

Output = dict[str, Any]   # one nbformat output (stream, display_data, execute_result, error), as JSON


class CellRequest(TypedDict):
    source: str
    timeout: float


class CellReply(TypedDict):
    outputs: list[Output]
    status: Literal["ok", "dead"]


class OracleSocket(TypedDict):
    """One socket for every cell of the host: its path inside the sandbox and outside it."""
    inside: str
    outside: str


# each optional key in a `total=False` subclass: typing.NotRequired is Python 3.11's, the course runs on 3.10
class _OracleFolder(TypedDict):
    inside: str
    outside: str
    name: str | None


class OracleFolder(_OracleFolder, total=False):
    """A folder of sockets, one per kernel; `name`: the host's own (opening cells') socket."""
    here: str   # set in the host: `inside` or `outside`, as it sees the folder


class _HostSettings(TypedDict):
    isolate: bool
    workdir: str
    env: dict[str, str]
    stage: str                  # an empty folder the grader made (and removes)
    startup_timeout: float
    keep: list[str]             # folders bound read-only into the sandbox's root
    files: dict[str, str]       # the drop's data files: name, bytes in hex


class HostSettings(_HostSettings, total=False):
    """The host's first line: what `sandbox.isolate` builds and what its kernels get."""
    replace: list[tuple[str, str, bool]]   # (source, target, writable): bound over target
    package_parent: str
    withheld_marker: str
    oracle: OracleSocket
    oracle_folder: OracleFolder
    cgroup_procs: list[str]
    limits: dict[str, int]   # over sandbox.LIMITS
    under_tmp: list[str]     # set in the host by `sandbox.isolate`: its mounts under /tmp


class SandboxReport(TypedDict, total=False):
    """What the host says it did (`sandbox.isolate`, then kernel_host); empty where no host started."""
    namespaces: bool
    limits: dict[str, int | str]   # each limit set, or why not
    refused: str                   # why there are no namespaces
    package: str                   # "withheld", or where the kernels' threeaxes is imported from
    budget: str                    # the grader's: how the host's control group was made (budget.Budget.how)
