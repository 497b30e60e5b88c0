"""What a submission's kernel may see and use (called by `autograder.kernel_host`).

Where Linux lets an unprivileged process make namespaces (most distributions,
CI containers, not macOS), the kernel host:

1. enters new user, mount and network namespaces: the network is a loopback
   of its own (the ranks' gloo needs it), nothing outside is reachable; the
   process limit then counts this namespace's processes, even for root;
2. changes root into a tree of its own that holds only the system's programs
   and libraries, the Python environment and the `threeaxes` package, all
   read-only, and a fresh /tmp: the course (solutions in `source/`, the
   gradebook, other students' submissions and feedback), home folders, other
   submissions' scratch and any other copy of the course are not in it. The
   kernel works in /tmp/work;
3. enters a new PID namespace, so killing the host kills every process the
   submission started, and a nested user namespace so the kernel holds no
   privilege that could undo the mounts;
4. sets resource limits: address space, CPU seconds, file size, processes.

Each submission's kernel, forked from the host (autograder/forked_kernel.py),
then enters a world of its own (`enter_kernel_world`): a fresh /tmp that holds
a copy of the host's, a fresh /dev/shm, a PID namespace of which it is the
first process, and one more nested user namespace.

Where namespaces are refused, it says so in its report and keeps only the
limits, a scratch folder and a clean environment.
"""
from __future__ import annotations

import ctypes
import os
import platform
import resource
import shutil
import signal
import socket
import struct
import fcntl

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}   # syscall numbers (glibc has no wrapper)
PR_SET_PDEATHSIG = 1

LIMITS = {  # per process, inherited by the kernel and its ranks
    "RLIMIT_AS": 8 << 30,        # bytes of address space (torch alone maps ~3 GiB)
    "RLIMIT_CPU": 900,           # CPU seconds
    "RLIMIT_FSIZE": 256 << 20,   # largest file it may write
    "RLIMIT_NPROC": 2048,        # processes and threads of its user
    "RLIMIT_CORE": 0,
}

_libc = ctypes.CDLL(None, use_errno=True)


def _call(name, *args):
    if getattr(_libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def _mount(source, target, fstype, flags, data=None):
    _call("mount", _b(source), _b(target), _b(fstype), ctypes.c_ulong(flags), _b(data))


def _b(text):
    return None if text is None else os.fsencode(text)


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def isolate(settings: dict) -> dict:
    """Isolate this process (see the module docstring); returns what was done."""
    report = {"namespaces": False, "limits": {}}
    if settings.get("isolate"):
        try:
            _enter_namespaces(settings)
            report["namespaces"] = True
        except OSError as exc:
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


def _private_folders(settings: dict) -> None:
    """Without a private /tmp: work and home in the grader's scratch folder (it removes it)."""
    base = settings["stage"]
    for key, value in settings["env"].items():
        settings["env"][key] = value.replace("/tmp/", base + "/")
    settings["workdir"] = settings["workdir"].replace("/tmp/", base + "/")


def _enter_namespaces(settings: dict) -> None:
    uid, gid = os.getuid(), os.getgid()
    _call("unshare", CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWPID)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")
    _become_pid_one()
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    _minimal_root(settings["keep"], settings["stage"], settings.get("replace", ()))
    _loopback_up()
    _drop_privilege(uid, gid)


def _drop_privilege(uid: int, gid: int) -> None:
    """A nested user namespace, in which the process is `uid`/`gid`: it keeps no privilege
    over the mounts made so far."""
    outside_uid, outside_gid = os.getuid(), os.getgid()
    _call("unshare", CLONE_NEWUSER | CLONE_NEWNS)
    _write("/proc/self/setgroups", "deny")
    _write("/proc/self/uid_map", f"{uid} {outside_uid} 1")
    _write("/proc/self/gid_map", f"{gid} {outside_gid} 1")


def die_with_parent() -> None:
    """End this process when the one that started it ends, however it ends (a grading
    worker killed, or stopped by Ctrl-C): no kernel host outlives its grader."""
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:    # the parent was already gone before the line above
        os._exit(1)


def _become_pid_one(announce=None) -> None:
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
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def enter_kernel_world(namespaces: bool, settings: dict, announce) -> None:
    """In a child the kernel host forked for one submission (autograder/kernel_host.py):
    a world of its own, started from the host's. With namespaces: a fresh /tmp holding a
    copy of the host's (its work and home folders) and a fresh /dev/shm, a PID namespace
    whose init this process becomes, and a nested user namespace, as in `isolate`.
    Without: its own process group, and a copy of the work folder to work in."""
    if not namespaces:
        os.setsid()
        _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        workdir = os.path.join(settings["stage"], f"kernel-{os.getpid()}")
        # (without a sandbox the work folder may be the stage itself: earlier kernels' copies stay out)
        shutil.copytree(os.getcwd(), workdir, symlinks=True, ignore_dangling_symlinks=True,
                        ignore=shutil.ignore_patterns("kernel-*"))
        os.chdir(workdir)
        return
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    files = _read_tree("/tmp")
    _call("unshare", CLONE_NEWNS | CLONE_NEWPID)
    for folder in ("/tmp", "/dev/shm"):
        _mount("tmpfs", folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1g,mode=1777")
    _write_tree(files)
    _become_pid_one(announce)
    _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV)   # this namespace's processes only
    _drop_privilege(os.getuid(), os.getgid())
    os.chdir(settings["workdir"])


def _read_tree(top: str) -> list:
    """(path, mode, bytes or link target) of the folders, files and links under `top`;
    sockets and pipes (a forkserver's, say) stay behind."""
    found = []
    for folder, dirs, names in os.walk(top):
        found.append((folder, os.stat(folder).st_mode, None))
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                found.append((path, None, os.readlink(path)))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    found.append((path, os.stat(path).st_mode, f.read()))
    return found


def _write_tree(found: list) -> None:
    for path, mode, data in found:
        if mode is None:
            os.symlink(data, path)
        elif data is None:
            os.makedirs(path, exist_ok=True)
            os.chmod(path, mode & 0o7777)
        else:
            with open(path, "wb") as f:
                f.write(data)
            os.chmod(path, mode & 0o7777)


# What a kernel needs of the machine: programs, libraries, /etc (less its secrets),
# devices and the CPU description torch reads; everything else stays out of sight.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys", "/dev")
SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/ssh")


def _minimal_root(keep: list[str], stage: str, replace=()) -> None:
    """Change root into a new, mostly empty tree: SYSTEM and `keep` bound read-only,
    a fresh /tmp, /dev/shm and /proc; each (source, target, writable) of `replace` bound
    over target (autograder/borrowed.py: the package with withheld functions). Home folders, the course, other submissions'
    scratch and any other copy of the course on the machine are simply not there."""
    # the new tree is built on a tmpfs of this mount namespace's own over `stage`, an
    # empty folder the grader made (and removes), so nothing the tree needs is hidden
    _mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=755")
    new, empty = stage + "/root", stage + "/empty"
    os.mkdir(new)
    os.mkdir(empty)

    def bind(path, read_only=True):
        os.makedirs(new + path, exist_ok=True)
        _mount(path, new + path, None, MS_BIND | MS_REC)
        if read_only:
            _mount(None, new + path, None, MS_BIND | MS_REMOUNT | MS_RDONLY)

    for path in SYSTEM:
        if os.path.exists(path):
            bind(path, read_only=path != "/dev")
    for path in SECRETS:
        if os.path.exists(new + path):
            _mount(empty if os.path.isdir(path) else "/dev/null", new + path, None, MS_BIND)
    for folder in ("/tmp", "/dev/shm"):
        os.makedirs(new + folder, exist_ok=True)
        _mount("tmpfs", new + folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1g,mode=1777")
    os.makedirs(new + "/proc", exist_ok=True)
    _mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV)
    for path in keep:   # after /tmp: a Python environment may live under it
        if os.path.exists(path):
            bind(path)
    for source, target, writable in replace:   # the graded copy of threeaxes; the grader's socket
        os.makedirs(new + target, exist_ok=True)
        _mount(source, new + target, None, MS_BIND | MS_REC)
        if not writable:
            _mount(None, new + target, None, MS_BIND | MS_REMOUNT | MS_RDONLY)
    # pivot_root, not chroot: a chrooted process may not make the nested user namespace
    _mount(new, new, None, MS_BIND | MS_REC)
    os.chdir(new)
    if _libc.syscall(PIVOT_ROOT[platform.machine()], b".", b".") != 0:
        raise OSError(ctypes.get_errno(), "pivot_root: " + os.strerror(ctypes.get_errno()))
    _call("umount2", _b("."), MNT_DETACH)
    os.chdir("/")


def _loopback_up() -> None:
    """Bring up `lo` in the new network namespace (SIOCSIFFLAGS: UP|LOOPBACK|RUNNING)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        fcntl.ioctl(s, 0x8914, struct.pack("16sH14x", b"lo", 0x1 | 0x8 | 0x40))


def kill_tree(proc) -> None:
    """Stop a kernel host and everything it started (its process group; inside
    a PID namespace the whole namespace goes with it)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
