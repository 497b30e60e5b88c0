"""What the hub needs to know about this machine: who runs it, which folders other accounts
can open, the course's packages, Unix accounts, a free port."""
from __future__ import annotations

import os
import stat
import subprocess
import sysconfig
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pwd


class HubError(SystemExit):
    """Something the hub cannot start without; the message says what to do."""


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def open_to_all(path: Path) -> bool:
    """Every folder above `path` may be entered by others, and others may read or run it."""
    path = Path(path).resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents]) and bool(
        path.stat().st_mode & stat.S_IROTH)


def course_site() -> Path:
    """The course environment's packages (the .venv this runs in)."""
    return Path(sysconfig.get_paths()["purelib"])


def pwd_entry(name: str) -> pwd.struct_passwd:
    import pwd

    return pwd.getpwnam(name)


def has_account(name: str) -> bool:
    try:
        pwd_entry(name)
        return True
    except KeyError:
        return False


def make_account(name: str, password: str) -> None:
    """A Unix account with a home only it can open and `password` (root only)."""
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", name],
                   check=True, capture_output=True)
    os.chmod(Path(pwd_entry(name).pw_dir), 0o700)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True, capture_output=True)


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
