"""One budget for a kernel host and everything it starts: memory, tasks and a share of CPU, in a
control group (why, and where one can be made: CONTRIBUTING.md, "The sandbox a kernel runs in").

    budget = Budget.make()            # in the grader, before the host starts
    settings["cgroup_procs"] = budget.procs_files   # the host joins them first thing
    budget.remove()                   # after the host is gone"""
from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

MEMORY_BYTES = 6 << 30   # a drop's eight ranks use under 3 GiB; the machines have 24
TASKS = 1024             # processes and threads: eight ranks hold ~30 threads each
CGROUP = Path("/sys/fs/cgroup")
PREFIX = "threeaxes-grade-"


class Budget:
    def __init__(self, folders: list[Path], how: str):
        self.folders, self.how = folders, how

    @property
    def procs_files(self) -> list[str]:
        return [str(folder / "cgroup.procs") for folder in self.folders]

    @classmethod
    def make(cls) -> Budget:
        sweep()
        # the grader's pid in the name: a group left by a grader that was killed is known as such
        name = f"{PREFIX}{os.getpid()}-{uuid.uuid4().hex[:12]}"
        refused = []
        for attempt in (_version_1, _version_2):
            try:
                folders = attempt(name)
            except OSError as exc:
                refused.append(f"{attempt.__doc__}: {exc}")
                continue
            if folders:
                return cls(folders, f"a control group of its own ({attempt.__doc__}): "
                                    f"{MEMORY_BYTES >> 30} GiB, {TASKS} tasks, an equal share of CPU")
        return cls([], "limits per process only: this machine lets the grader make no control group"
                       + (f" ({'; '.join(refused)})" if refused else ""))

    def remove(self) -> None:
        """Stop whatever is left in the group and remove it (its tasks need a moment to go)."""
        for folder in self.folders:
            for _ in range(50):
                try:
                    for pid in (folder / "cgroup.procs").read_text().split():
                        os.kill(int(pid), signal.SIGKILL)
                    folder.rmdir()
                    break
                except (ProcessLookupError, OSError):
                    time.sleep(0.05)


def sweep() -> list[Path]:
    """Remove the empty groups that graders killed before they could remove them (a worker
    killed mid-submission leaves its budget behind): those whose grader, named by the pid in
    the group's name, is gone. A live grader's groups are never touched. Returns those removed."""
    removed = []
    for controller in ("memory", "pids", "cpu", ""):
        try:
            parent = CGROUP / controller / _own_group(controller) if controller else CGROUP / _own_group("")
            groups = list(parent.glob(f"{PREFIX}*"))
        except OSError:
            continue
        for group in groups:
            owner = group.name[len(PREFIX):].split("-", 1)[0]
            if owner.isdigit() and _alive(int(owner)):
                continue
            try:
                group.rmdir()        # refused while a task is still in it
                removed.append(group)
            except OSError:
                pass
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def join(procs_files: list[str]) -> None:
    """In the kernel host, first thing: this process (and all it will start) into the budget."""
    for path in procs_files:
        with open(path, "w") as f:
            f.write(str(os.getpid()))


def _own_group(controller: str) -> str:
    """This process's group in the hierarchy of `controller` ("" for cgroup v2), from /proc."""
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path.lstrip("/")
    raise OSError(f"no {controller or 'cgroup v2'} hierarchy")


def _version_1(name: str) -> list[Path]:
    """cgroup v1"""
    if os.geteuid() != 0 or not (CGROUP / "memory" / "cgroup.procs").exists():
        return []
    made = []
    try:
        for controller, settings in (("memory", {"memory.limit_in_bytes": MEMORY_BYTES}),
                                     ("pids", {"pids.max": TASKS}), ("cpu", {})):
            folder = CGROUP / controller / _own_group(controller) / name
            folder.mkdir()
            made.append(folder)
            for file, value in settings.items():
                (folder / file).write_text(str(value))
    except OSError:
        for folder in made:
            folder.rmdir()
        raise
    return made


def _version_2(name: str) -> list[Path]:
    """cgroup v2"""
    if not (CGROUP / "cgroup.controllers").exists():
        return []
    parent = CGROUP / _own_group("")
    enabled = set((parent / "cgroup.subtree_control").read_text().split())
    if not {"memory", "pids", "cpu"} <= enabled:
        return []
    folder = parent / name
    folder.mkdir()
    try:
        (folder / "memory.max").write_text(str(MEMORY_BYTES))
        (folder / "pids.max").write_text(str(TASKS))
    except OSError:
        folder.rmdir()
        raise
    return [folder]
