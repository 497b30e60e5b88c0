"""The system calls under the sandbox: namespaces' flags, mounts, and the minimal root a
kernel changes into (`minimal_root`: the system and the Python environment read-only, all
the way down; nothing of the course)."""
from __future__ import annotations

import ctypes
import os
import platform
from collections.abc import Iterable, Sequence

CLONE_NEWNS, CLONE_NEWUSER, CLONE_NEWPID, CLONE_NEWNET = 0x20000, 0x10000000, 0x20000000, 0x40000000
CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC = 0x02000000, 0x04000000, 0x08000000
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
MNT_DETACH = 2
PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}   # syscall numbers (glibc has no wrapper)
MOUNT_SETATTR = 442                            # the same on x86_64 and aarch64 (Linux 5.12+)
AT_RECURSIVE, MOUNT_ATTR_RDONLY = 0x8000, 0x1

libc = ctypes.CDLL(None, use_errno=True)

# read_tree's (path, mode, what): a folder (mode, None), a file (mode, its bytes), a link (None, its target)
Entry = tuple[str, int, None] | tuple[str, int, bytes] | tuple[str, None, str]


def call(name: str, *args: object) -> None:
    if getattr(libc, name)(*args) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{name}: {os.strerror(err)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    call("mount", fs_bytes(source), fs_bytes(target), fs_bytes(fstype), ctypes.c_ulong(flags), fs_bytes(data))


def fs_bytes(text: str | None) -> bytes | None:
    return None if text is None else os.fsencode(text)


def write_text(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def read_tree(top: str, skip: set[str] | frozenset[str] = frozenset()) -> list[Entry]:
    """(path, mode, bytes or link target) of the folders, files and links under `top`, less
    the folders in `skip` (mounts); sockets and pipes (a forkserver's, say) stay behind."""
    found: list[Entry] = []
    for folder, dirs, names in os.walk(top):
        dirs[:] = [d for d in dirs if os.path.join(folder, d) not in skip]
        found.append((folder, os.stat(folder).st_mode, None))
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                found.append((path, None, os.readlink(path)))
            elif os.path.isfile(path):
                with open(path, "rb") as f:
                    found.append((path, os.stat(path).st_mode, f.read()))
    return found


def write_tree(found: Iterable[Entry]) -> None:
    for entry in found:   # indexed, not unpacked: mypy tells the three kinds apart by entry[1], entry[2]
        path = entry[0]
        if entry[1] is None:     # a link: its target
            os.symlink(entry[2], path)
        elif entry[2] is None:   # a folder
            os.makedirs(path, exist_ok=True)
            os.chmod(path, entry[1] & 0o7777)
        else:                    # a file: its bytes
            with open(path, "wb") as f:
                f.write(entry[2])
            os.chmod(path, entry[1] & 0o7777)


# What a kernel needs of the machine: programs, libraries, /etc (less its secrets), the
# CPU description torch reads (/sys) and a few devices; everything else stays out of sight.
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
SECRETS = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-", "/etc/ssh")
DEVICES = ("null", "zero", "full", "random", "urandom")


def minimal_root(keep: list[str], stage: str, replace: Sequence[tuple[str, str, bool]] = ()) -> list[str]:
    """Change root into a new, mostly empty tree: SYSTEM and `keep` bound read-only all the
    way down, a /dev of DEVICES only, a fresh /tmp, /dev/shm and /proc; each (source, target,
    writable) of `replace` bound over target (autograder/withheld.py: the package with
    withheld functions; the grader's socket). Home folders, the course, other submissions'
    scratch and any other copy of the course on the machine are simply not there. Returns
    the mounts made under /tmp (a kernel's fresh /tmp binds them again)."""
    # the new tree is built on a tmpfs of this mount namespace's own over `stage`, an
    # empty folder the grader made (and removes), so nothing the tree needs is hidden
    mount("tmpfs", stage, "tmpfs", MS_NOSUID | MS_NODEV, "size=64m,mode=755")
    new, empty = stage + "/root", stage + "/empty"
    os.mkdir(new)
    os.mkdir(empty)

    def bind(path: str, target: str | None = None, read_only: bool = True) -> None:
        target = new + (target or path)
        if os.path.isdir(path):
            os.makedirs(target, exist_ok=True)
        else:   # a file, a device, a socket: bound onto an empty file
            os.makedirs(os.path.dirname(target), exist_ok=True)
            open(target, "a").close()
        mount(path, target, None, MS_BIND | MS_REC)
        if read_only:
            make_read_only(target)

    for path in SYSTEM:
        if os.path.exists(path):
            bind(path)
    for path in SECRETS:
        if os.path.exists(new + path):
            mount(empty if os.path.isdir(path) else "/dev/null", new + path, None, MS_BIND)
            make_read_only(new + path)
    os.makedirs(new + "/dev")
    mount("tmpfs", new + "/dev", "tmpfs", MS_NOSUID, "size=64k,mode=755")
    for name in DEVICES:   # device files may be written on a read-only mount: /dev/null works
        bind("/dev/" + name)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"),
                         ("stdout", "/proc/self/fd/1"), ("stderr", "/proc/self/fd/2")):
        os.symlink(target, f"{new}/dev/{name}")
    for folder in ("/tmp", "/dev/shm"):
        os.makedirs(new + folder, exist_ok=True)
        mount("tmpfs", new + folder, "tmpfs", MS_NOSUID | MS_NODEV, "size=1g,mode=1777")
    mount(None, new + "/dev", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID)
    os.makedirs(new + "/proc", exist_ok=True)
    mount("proc", new + "/proc", "proc", MS_NOSUID | MS_NODEV)
    for path in keep:   # after /tmp: a Python environment may live under it
        if os.path.exists(path):
            bind(path)
    for source, target, writable in replace:   # the graded copy of threeaxes; the grader's socket
        bind(source, target, read_only=not writable)
    under_tmp = sorted({p for p in [*keep, *(t for _, t, _ in replace)]
                        if p.startswith("/tmp/") and os.path.exists(new + p)})
    # pivot_root, not chroot: a chrooted process may not make the nested user namespace
    mount(new, new, None, MS_BIND | MS_REC)
    os.chdir(new)
    if libc.syscall(PIVOT_ROOT[platform.machine()], b".", b".") != 0:
        raise OSError(ctypes.get_errno(), "pivot_root: " + os.strerror(ctypes.get_errno()))
    call("umount2", fs_bytes("."), MNT_DETACH)
    os.chdir("/")
    mount(None, "/", None, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)   # its top only
    return under_tmp


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def make_read_only(target: str) -> None:
    """`target` and every mount under it read-only: one `mount_setattr` (Linux 5.12+), or
    else a remount of each mount under it, its other flags kept."""
    attr = _MountAttr(MOUNT_ATTR_RDONLY, 0, 0, 0)
    if libc.syscall(MOUNT_SETATTR, -100, fs_bytes(target), AT_RECURSIVE,   # -100: AT_FDCWD
                     ctypes.byref(attr), ctypes.sizeof(attr)) == 0:
        return
    for mount_point in _mounts_under(target):
        kept = os.statvfs(mount_point).f_flag   # ST_* flags: the same bits as MS_*, but relatime
        flags = (kept & (MS_NOSUID | MS_NODEV | 8 | 1024 | 2048)) | (1 << 21 if kept & 4096 else 0)
        mount(None, mount_point, None, MS_BIND | MS_REMOUNT | MS_RDONLY | flags)


def _mounts_under(target: str) -> list[str]:
    """`target` and the mount points below it, from /proc/self/mountinfo (octal escapes undone)."""
    points = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4].encode().decode("unicode_escape")
            if point == target or point.startswith(target.rstrip("/") + "/"):
                points.append(point)
    return points
