"""The pinned jupyterhub and configurable-http-proxy (hub/), installed once into a cache of
their own, never into the course's .venv."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from autograder import course
from autograder.apps.hub.machine import HubError, course_site, is_root, open_to_all

ROOT = course.ROOT
HUB = ROOT / "hub"
# Which course packages the hub's venv sees: the .venv it was installed from, unless the hub
# and the users' servers are told another (a staged copy, autograder/apps/hub/staging.py).
SITE_VARIABLE = "THREEAXES_COURSE_SITE"


def pins() -> dict[str, str]:
    hub = next(line.split("==")[1].strip() for line in (HUB / "requirements.txt").read_text().splitlines()
               if line.startswith("jupyterhub=="))
    proxy = json.loads((HUB / "package.json").read_text())["dependencies"]["configurable-http-proxy"]
    return {"jupyterhub": hub, "configurable-http-proxy": proxy}


def cache_root() -> Path:
    if os.environ.get("THREEAXES_HUB_CACHE"):
        return Path(os.environ["THREEAXES_HUB_CACHE"])
    if is_root():   # the single-user servers of real accounts run the hub's venv: it must be open to them
        return Path("/var/cache/threeaxes-hub")
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "threeaxes-hub"


def base_python(accounts: bool) -> Path:
    """The interpreter the hub's venv is made from: this one's base, or where other users
    must run it and cannot open its folders, the system's of the same version."""
    here = Path(getattr(sys, "_base_executable", sys.executable)).resolve()
    if not (accounts or is_root()) or open_to_all(here):   # as root: one cache for both modes
        return here
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = Path("/usr/bin") / version
    if system.exists() and open_to_all(system):
        return system.resolve()
    raise HubError(f"the students' servers run as their own accounts, and they cannot run {here} (a folder above "
                   f"it is closed to them) and there is no /usr/bin/{version}: install {version} from your "
                   f"distribution (apt-get install {version} {version}-venv), or make the course's Python "
                   f"readable by all")


def site_hook(default: Path) -> str:
    """The .pth line that adds the course's packages: a line starting with `import` runs, and
    addsitedir also reads the course's own .pth files (an editable install), which a plain path
    line would not."""
    return f"import os, site; site.addsitedir(os.environ.get({SITE_VARIABLE!r}) or {str(default)!r})\n"


@dataclass(frozen=True)
class Install:
    venv: Path
    proxy: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def jupyterhub(self) -> Path:
        return self.venv / "bin" / "jupyterhub"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)   # one install at a time (pytest workers, two terminals)
        yield


def _run(argv: list, what: str, timeout: float) -> None:
    try:
        done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise HubError(f"{what} took over {timeout:.0f} s (is the package registry reachable?)") from None
    if done.returncode != 0:
        raise HubError(f"{what} failed:\n{(done.stdout + done.stderr)[-2000:]}")


def install(accounts: bool = False, log: Callable[[str], object] = print, timeout: float = 300) -> Install:
    """The pinned hub and proxy in a cache, made once and reused: a venv whose Python also
    sees the course's packages (site_hook), so jupyterhub-singleuser serves the course's JupyterLab."""
    python = base_python(accounts)
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    hook = site_hook(course_site())
    key = hashlib.sha256(b"".join(p.read_bytes() for p in (HUB / "requirements.txt", ROOT / "constraints.txt",
                                                            HUB / "package.json", HUB / "package-lock.json"))
                         + str(python).encode() + hook.encode()).hexdigest()[:12]
    where = cache_root() / f"py{ver}-{key}"
    done = Install(where / "venv", where / "proxy" / "node_modules" / ".bin" / "configurable-http-proxy")
    stamp = where / "installed"
    if stamp.exists():
        return done
    for tool in ("node", "npm"):
        if shutil.which(tool) is None:
            raise HubError(f"the hub's proxy (configurable-http-proxy, npm) needs Node.js 20 or newer and npm, and "
                           f"there is no `{tool}` on PATH: install them (apt-get install nodejs npm), then again")
    with _locked(cache_root() / ".lock"):
        if stamp.exists():
            return done
        old = os.umask(0o022)   # readable by the accounts whose servers run from it
        try:
            shutil.rmtree(where, ignore_errors=True)
            log(f"installing jupyterhub {pins()['jupyterhub']} and configurable-http-proxy "
                f"{pins()['configurable-http-proxy']} into {where} (once; about a minute)")
            _run([python, "-m", "venv", "--without-pip", done.venv], "making the hub's venv", 120)
            site = Path(subprocess.run([done.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                       capture_output=True, text=True, check=True).stdout.strip())
            (site / "threeaxes_course.pth").write_text(hook)
            # this environment's pip (or uv, autograder.apps.install) installs into the hub's venv
            _run([sys.executable, "-m", "autograder.apps.install", "-q", "--target-python", done.python,
                  "-r", HUB / "requirements.txt", "-c", ROOT / "constraints.txt"], "pip install jupyterhub", timeout)
            (where / "proxy").mkdir()
            for name in ("package.json", "package-lock.json"):
                shutil.copy(HUB / name, where / "proxy" / name)
            _run(["npm", "ci", "--prefix", where / "proxy", "--omit=dev", "--no-audit", "--no-fund",
                  "--loglevel=error"], "npm ci configurable-http-proxy", timeout)
            stamp.write_text(json.dumps(pins()) + "\n")
        finally:
            os.umask(old)
    return done
