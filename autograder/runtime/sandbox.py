"""What a submission's kernel may see and use: namespaces, a minimal read-only root, no privilege,
limits (called by `autograder.runtime.kernel_host`). The layers and why: CONTRIBUTING.md,
"The sandbox a kernel runs in"."""
from __future__ import annotations

import fcntl
import os
import resource
import shutil
import signal
import socket
import struct
from collections.abc import Callable
from typing import Protocol

from autograder.runtime.messages import HostSettings, SandboxReport
from autograder.runtime.mounts import (
    CLONE_NEWCGROUP,
    CLONE_NEWIPC,
    CLONE_NEWNET,
    CLONE_NEWNS,
    CLONE_NEWPID,
    CLONE_NEWUSER,
    CLONE_NEWUTS,
    MS_BIND,
    MS_NODEV,
    MS_NOSUID,
    MS_PRIVATE,
    MS_REC,
    call,
    make_read_only,
    minimal_root,
    mount,
    read_tree,
    write_text,
    write_tree,
)

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38
KERNEL_UID = KERNEL_GID = 65534                # nobody: what a kernel is when root grades

LIMITS = {  # per process, inherited by the kernel and its ranks
    "RLIMIT_AS": 8 << 30,        # bytes of address space (torch alone maps ~3 GiB)
    "RLIMIT_CPU": 900,           # CPU seconds
    "RLIMIT_FSIZE": 256 << 20,   # largest file it may write
    "RLIMIT_NPROC": 2048,        # processes and threads of its user
    "RLIMIT_NOFILE": 4096,       # open files and sockets of each process (ranks' gloo needs a few hundred)
    "RLIMIT_CORE": 0,
}


def isolate(settings: HostSettings) -> SandboxReport:
    """Isolate this process (the layers: CONTRIBUTING.md, "The sandbox a kernel runs in"); returns what was done."""
    report: SandboxReport = {"namespaces": False, "limits": {}}
    if settings.get("isolate"):
        root = os.getuid() == 0
        try:
            _enter_namespaces(settings)
            report["namespaces"] = True
        except OSError as exc:
            if root:   # a kernel run by root with no sandbox would be root on the machine
                raise RuntimeError(f"grading refused: run by root, the grader needs its sandbox, and "
                                   f"Linux refused it ({exc}); grade as another user") from exc
            report["refused"] = f"no namespaces here ({exc}); the kernel still runs under limits"
            _private_folders(settings)
    os.makedirs(settings["workdir"], exist_ok=True)
    os.makedirs(settings["env"]["HOME"], exist_ok=True)
    for name, data in settings.get("files", {}).items():
        with open(os.path.join(settings["workdir"], name), "wb") as f:
            f.write(bytes.fromhex(data))
    for name, value in {**LIMITS, **settings.get("limits", {})}.items():
        try:
            resource.setrlimit(getattr(resource, name), (value, value))
            report["limits"][name] = value
        except (ValueError, OSError) as exc:
            report["limits"][name] = f"not set: {exc}"
    os.chdir(settings["workdir"])
    return report


def _private_folders(settings: HostSettings) -> None:
    """Without a private /tmp: work and home in the grader's scratch folder (it removes it)."""
    base = settings["stage"]
    for key, value in settings["env"].items():
        settings["env"][key] = value.replace("/tmp/", base + "/")
    settings["workdir"] = settings["workdir"].replace("/tmp/", base + "/")


ISOLATED = CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | CLONE_NEWCGROUP


def _enter_namespaces(settings: HostSettings) -> None:
    uid, gid = os.getuid(), os.getgid()
    if uid == 0:   # real privilege: the mounts as root, then none of it (`_give_up_root`)
        call("unshare", ISOLATED)
    else:          # the privilege of a user namespace of its own, over its own mounts only
        call("unshare", CLONE_NEWUSER | ISOLATED)
        write_text("/proc/self/setgroups", "deny")
        write_text("/proc/self/uid_map", f"0 {uid} 1")
        write_text("/proc/self/gid_map", f"0 {gid} 1")
    _become_pid_one()
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    settings["under_tmp"] = minimal_root(settings["keep"], settings["stage"], settings.get("replace", ()))
    _loopback_up()
    if uid == 0:
        uid, gid = _give_up_root()
    _drop_privilege(uid, gid)


def confine_worker(keep: list[str], stage: str) -> str:
    """For a process of the grader's that computes what a kernel asks for (the oracle's
    workers, autograder/runtime/oracle_worker.py), run by root: the kernel's minimal root (`keep`
    read-only, no course, no home folders), no network, and KERNEL_UID with no privilege.
    Run by another user it stays that user, unconfined: it holds no more than the grader.
    Returns what was done."""
    if os.getuid() != 0:
        return "its grader's own user (not root), unconfined"
    call("unshare", CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC | CLONE_NEWUTS)
    mount(None, "/", None, MS_REC | MS_PRIVATE)
    minimal_root(keep, stage)
    _drop_privilege(*_give_up_root())
    return f"uid {KERNEL_UID} in a root of its own"


def _give_up_root() -> tuple[int, int]:
    """Become KERNEL_UID for good (no groups, no way back, no setuid program's gain):
    what the kernel then writes, it writes as an account that owns nothing."""
    os.setgroups([])
    os.setresgid(KERNEL_GID, KERNEL_GID, KERNEL_GID)
    os.setresuid(KERNEL_UID, KERNEL_UID, KERNEL_UID)
    call("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    # a changed uid makes /proc/self root's; the user namespace below must write its maps
    call("prctl", PR_SET_DUMPABLE, 1, 0, 0, 0)
    return KERNEL_UID, KERNEL_GID


def _drop_privilege(uid: int, gid: int) -> None:
    """A nested user namespace, in which the process is `uid`/`gid`: it keeps no privilege
    over the mounts made so far (they are locked: read-only stays read-only)."""
    outside_uid, outside_gid = os.getuid(), os.getgid()
    call("unshare", CLONE_NEWUSER | CLONE_NEWNS)
    write_text("/proc/self/setgroups", "deny")
    write_text("/proc/self/uid_map", f"{uid} {outside_uid} 1")
    write_text("/proc/self/gid_map", f"{gid} {outside_gid} 1")


def die_with_parent() -> None:
    """End this process when the one that started it ends, however it ends (a grading
    worker killed, or stopped by Ctrl-C): no kernel host outlives its grader."""
    call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:    # the parent was already gone before the line above
        os._exit(1)


def _become_pid_one(announce: Callable[[int], object] | None = None) -> None:
    """Fork into the new PID namespace; the parent waits and passes on the exit
    status (`announce` first hears the child's pid, as the parent sees it). The
    child dies with its parent, and every process of the namespace dies with
    the child."""
    pid = os.fork()
    if pid:
        if announce is not None:
            announce(pid)
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, lambda *_: os._exit(1))
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def enter_kernel_world(namespaces: bool, settings: HostSettings, announce: Callable[[int], object]) -> None:
    """In a child the kernel host forked for one submission (autograder/runtime/kernel_host.py):
    a world of its own, started from the host's. With namespaces: a fresh /tmp holding a
    copy of the host's (the work and home folders, not the mounts under /tmp, which are
    bound again), a fresh /dev/shm, an IPC namespace and a PID namespace whose init this
    process becomes, /proc/sys read-only, and a nested user namespace, as in `isolate`.
    Without: its own process group, and a copy of the work folder to work in."""
    if not namespaces:
        os.setsid()
        call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        workdir = os.path.join(settings["stage"], f"kernel-{os.getpid()}")
        # (without a sandbox the work folder may be the stage itself: earlier kernels' copies stay out)
        shutil.copytree(os.getcwd(), workdir, symlinks=True, ignore_dangling_symlinks=True,
                        ignore=shutil.ignore_patterns("kernel-*"))
        os.chdir(workdir)
        return
    call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    under_tmp = settings.get("under_tmp", [])
    files = read_tree("/tmp", skip=set(under_tmp))
    call("unshare", CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC)
    old_tmp = os.open("/tmp", os.O_PATH | os.O_DIRECTORY)   # the mounts under it, once it is hidden
    for folder in ("/tmp", "/dev/shm"):
        mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1g,mode=1777")
    for path in under_tmp:   # the Python environment or the package, where they live under /tmp
        os.makedirs(path, exist_ok=True)
        mount(f"/proc/self/fd/{old_tmp}/{os.path.relpath(path, '/tmp')}", path, None, MS_BIND | MS_REC)
    os.close(old_tmp)
    write_tree(files)
    _become_pid_one(announce)
    mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV)   # this namespace's processes only
    mount("/proc/sys", "/proc/sys", None, MS_BIND | MS_REC)
    make_read_only("/proc/sys")
    _drop_privilege(os.getuid(), os.getgid())
    os.chdir(settings["workdir"])


def _loopback_up() -> None:
    """Bring up `lo` in the new network namespace (SIOCSIFFLAGS: UP|LOOPBACK|RUNNING)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))


class Process(Protocol):
    """What kill_tree needs of a process: a subprocess.Popen, or one the zygote forked (zygote.Forked)."""
    pid: int

    def wait(self) -> object: ...


def kill_tree(proc: Process) -> None:
    """Stop a kernel host and everything it started (its process group; inside
    a PID namespace the whole namespace goes with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
