"""A JupyterHub for one class on this machine: `make hub` (python -m autograder.hub start).

    python -m autograder.hub install                 jupyterhub and configurable-http-proxy, pinned in hub/,
                                                     into a cache (never into .venv, never by make lab)
    python -m autograder.hub start [--students a,b] [--instructor NAME] [--port 8000] [--ip 0.0.0.0]
                                   [--state DIR] [--course DIR] [--demo] [--create-users]

What `start` sets up (hub/jupyterhub_config.py reads it from <state>/settings.json):

- the hub and configurable-http-proxy; every user's server is JupyterLab from the
  course's environment (the course's .venv, seen through the hub's own venv);
- nbgrader's extensions as nbgrader documents for a hub: students get the assignment
  list only; the instructor the formgrader, the course list and the assignment list
  (the same settings `jupyter server extension enable --user ...` and `jupyter
  labextension disable --level=user ...` would write, kept in <state>/jupyter/<role>/);
- the exchange, <state>/exchange, writable by every user, named in every user's
  nbgrader_config.py with the course id and strict submission;
- users: real Unix accounts logging in with their own password (PAM; the servers run
  as them) where this runs as root; otherwise (or with --demo) the hub's documented
  demo setup, SharedPasswordAuthenticator and SimpleLocalProcessSpawner: every user a
  home under <state>/homes/, one system user, passwords in <state>/passwords.txt.

Each thing that can be wrong before the hub starts (no Node, an exchange others
cannot write to, a course folder the instructor cannot open, a missing account)
stops it with what to do about it.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import sysconfig
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HUB = ROOT / "hub"
COURSE_ID = "three-axes"
STUDENT_SERVER = ["nbgrader.server_extensions.assignment_list"]
INSTRUCTOR_SERVER = [*STUDENT_SERVER, "nbgrader.server_extensions.formgrader",
                     "nbgrader.server_extensions.course_list"]
# the lab plugins a student's page leaves out (nbgrader's table: students get the assignment list)
STUDENT_LAB_OFF = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                   "@jupyter/nbgrader:course-list", "@jupyterlab/apputils-extension:announcements"]
INSTRUCTOR_LAB_OFF = ["@jupyterlab/apputils-extension:announcements"]


class HubError(SystemExit):
    """Something the hub cannot start without; the message says what to do."""


def pins() -> dict[str, str]:
    hub = next(line.split("==")[1].strip() for line in (HUB / "requirements.txt").read_text().splitlines()
               if line.startswith("jupyterhub=="))
    proxy = json.loads((HUB / "package.json").read_text())["dependencies"]["configurable-http-proxy"]
    return {"jupyterhub": hub, "configurable-http-proxy": proxy}


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
def _locked(path: Path):
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


def install(accounts: bool = False, log=print, timeout: float = 300) -> Install:
    """The pinned hub and proxy in a cache, made once and reused: a venv whose Python also
    sees the course's .venv (a .pth), so jupyterhub-singleuser serves the course's JupyterLab."""
    python = base_python(accounts)
    ver = f"{sys.version_info.major}.{sys.version_info.minor}"
    key = hashlib.sha256(b"".join(p.read_bytes() for p in (HUB / "requirements.txt", ROOT / "constraints.txt",
                                                            HUB / "package.json", HUB / "package-lock.json"))
                         + str(python).encode() + str(course_site()).encode()).hexdigest()[:12]
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
            # lines starting with `import` run: addsitedir also reads the .venv's own .pth files
            # (the course installed editable), which a plain path line would not
            (site / "threeaxes_course.pth").write_text(f"import site; site.addsitedir({str(course_site())!r})\n")
            _run([sys.executable, "-m", "pip", "--python", done.python, "install", "-q", "--disable-pip-version-check",
                  "-r", HUB / "requirements.txt", "-c", ROOT / "constraints.txt"], "pip install jupyterhub", timeout)
            (where / "proxy").mkdir()
            for name in ("package.json", "package-lock.json"):
                shutil.copy(HUB / name, where / "proxy" / name)
            _run(["npm", "ci", "--prefix", where / "proxy", "--omit=dev", "--no-audit", "--no-fund", "--loglevel=error"],
                 "npm ci configurable-http-proxy", timeout)
            stamp.write_text(json.dumps(pins()) + "\n")
        finally:
            os.umask(old)
    return done


# -- the class's settings -------------------------------------------------------------
def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def default_state() -> Path:
    if is_root():
        return Path("/srv/threeaxes-hub")
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "threeaxes-hub"


def _nbgrader_config(lines: list[str]) -> str:
    return "\n".join(["# written by python -m autograder.hub: every user of the class's hub reads this",
                      "c = get_config()", *lines]) + "\n"


def write_role_configs(state: Path, exchange: Path, course: Path, demo: bool = False) -> None:
    """<state>/jupyter/{student,instructor}/: each role's nbgrader_config.py, its server
    extensions (jupyter_server_config.json, as `jupyter server extension enable` writes) and
    its lab plugins (labconfig/page_config.json, as `jupyter labextension disable` writes)."""
    common = [f"c.CourseDirectory.course_id = {COURSE_ID!r}", f"c.Exchange.root = {str(exchange)!r}",
              "c.ExchangeSubmit.strict = True    # refuse a submission whose notebook is missing or renamed"]
    every = sorted(set(INSTRUCTOR_SERVER))
    for role, server_on, lab_off, extra in (
        ("student", STUDENT_SERVER, STUDENT_LAB_OFF, []),
        ("instructor", INSTRUCTOR_SERVER, INSTRUCTOR_LAB_OFF, [f"c.CourseDirectory.root = {str(course)!r}"] + (
            # the demo's submissions all belong to one system user, not to the students they name
            ["c.ExchangeCollect.check_owner = False"] if demo else [])),
    ):
        folder = state / "jupyter" / role
        (folder / "labconfig").mkdir(parents=True, exist_ok=True)
        (folder / "nbgrader_config.py").write_text(_nbgrader_config(common + extra))
        (folder / "jupyter_server_config.json").write_text(json.dumps(
            {"ServerApp": {"jpserver_extensions": {name: name in server_on for name in every}}}, indent=1) + "\n")
        (folder / "labconfig" / "page_config.json").write_text(json.dumps(
            {"disabledExtensions": {name: True for name in lab_off}}, indent=1) + "\n")


def make_account(name: str, password: str) -> None:
    """A Unix account with a home only it can open and `password` (root only)."""
    subprocess.run(["useradd", "--create-home", "--shell", "/bin/bash", "--user-group", name],
                   check=True, capture_output=True)
    os.chmod(Path(pwd_entry(name).pw_dir), 0o700)
    subprocess.run(["chpasswd"], input=f"{name}:{password}\n", text=True, check=True, capture_output=True)


def pwd_entry(name: str):
    import pwd

    return pwd.getpwnam(name)


def has_account(name: str) -> bool:
    try:
        pwd_entry(name)
        return True
    except KeyError:
        return False


@dataclass
class Settings:
    state: Path
    students: list[str]
    instructor: str
    course: Path
    accounts: bool
    ip: str = "127.0.0.1"
    port: int = 8000
    server_args: tuple = ()      # more arguments for every user's JupyterLab

    @property
    def exchange(self) -> Path:
        return self.state / "exchange"


def prepare(cfg: Settings, done: Install, create_users: bool = False, log=print) -> dict:
    """Everything the hub reads, checked: the state folder, the exchange, the role configs,
    the accounts (or the demo passwords); returns settings.json's content."""
    state = cfg.state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o755)
    course = cfg.course.resolve()
    if not (course / "nbgrader_config.py").is_file():
        raise HubError(f"{course} is not the course folder (no nbgrader_config.py): pass --course <your clone>")
    exchange = state / "exchange"
    exchange.mkdir(exist_ok=True)
    exchange.chmod(0o777)       # nbgrader's exchange: every user writes their submissions into it
    passwords = {}
    users = [*cfg.students, cfg.instructor]
    if cfg.accounts:
        missing = [u for u in users if not has_account(u)]
        if missing and not create_users:
            raise HubError(f"no Unix account for {', '.join(missing)}: add them (useradd -m NAME; passwd NAME), "
                           f"or run again with --create-users, which adds them with passwords in "
                           f"{state / 'passwords.txt'} (readable by root only)")
        for name in missing:
            passwords[name] = secrets.token_urlsafe(9)
            make_account(name, passwords[name])
        owner = course.stat().st_uid
        if owner != pwd_entry(cfg.instructor).pw_uid:
            raise HubError(f"the course folder {course} must belong to the instructor's account {cfg.instructor} "
                           f"(their server grades and writes the gradebook there): clone the course into their "
                           f"home (sudo -u {cfg.instructor} git clone ...) and pass --course, or "
                           f"chown -R {cfg.instructor}: {course}")
        if not open_to_all(course_site()):
            raise HubError(f"the students' servers run as their own accounts and cannot read the course's "
                           f"packages in {course_site()}: make the folders above it readable (chmod o+rx)")
    else:
        passwords = {"students": secrets.token_urlsafe(12), "instructor": secrets.token_urlsafe(33)}
        saved = state / "passwords.json"
        if saved.exists():
            passwords = json.loads(saved.read_text())
        for name in users:
            # one system user for all: nbgrader would take its name as every student's id, so each
            # home's own nbgrader config names its student (README: the exchange on one account)
            (state / "homes" / name / ".jupyter").mkdir(parents=True, exist_ok=True)
            (state / "homes" / name / ".jupyter" / "nbgrader_config.py").write_text(
                _nbgrader_config([f"c.CourseDirectory.student_id = {name!r}"]))
    if passwords:
        target = state / ("passwords.json" if not cfg.accounts else "passwords.txt")
        text = (json.dumps(passwords) if not cfg.accounts else
                "".join(f"{u} {p}\n" for u, p in passwords.items()))
        if cfg.accounts and target.exists():
            text = target.read_text() + text
        target.write_text(text)
        target.chmod(0o600)
    token = state / "api_token"
    if not token.exists():
        token.write_text(secrets.token_hex(32) + "\n")
    token.chmod(0o600)
    shutil.copy(HUB / "singleuser.py", state / "singleuser.py")
    (state / "singleuser.py").chmod(0o644)
    write_role_configs(state, exchange, course, demo=not cfg.accounts)
    venv_root = Path(sys.prefix)
    settings = {
        "mode": "accounts" if cfg.accounts else "demo", "state": str(state), "ip": cfg.ip, "port": cfg.port,
        "hub_port": free_port(), "proxy_api_port": free_port(), "proxy": str(done.proxy),
        "python": str(done.python), "students": list(cfg.students), "instructor": cfg.instructor,
        "course": str(course), "exchange": str(exchange),
        "course_config": str(venv_root / "etc" / "jupyter"), "course_data": str(venv_root / "share" / "jupyter"),
        "course_lab": str(venv_root / "share" / "jupyter" / "lab"),
        "passwords": passwords if not cfg.accounts else {}, "server_args": list(cfg.server_args),
        "code": str(ROOT),
    }
    (state / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
    (state / "settings.json").chmod(0o600)
    return settings


def check_exchange(exchange: Path, course_id: str = COURSE_ID) -> list[str]:
    """What in the exchange keeps students from listing, fetching or submitting (the
    Assignments tab then shows nothing, or "Error fetching assignment"), each with its fix."""
    exchange = Path(exchange)
    if not exchange.is_dir():
        return [f"the exchange {exchange} does not exist: sudo mkdir -p {exchange} && sudo chmod ugo+rwx {exchange}"]
    problems = []
    if exchange.stat().st_mode & 0o777 != 0o777:
        problems.append(f"the exchange {exchange} is {oct(exchange.stat().st_mode & 0o777)[2:]}, not writable by "
                        f"every user: sudo chmod ugo+rwx {exchange}")
    course = exchange / course_id
    if not course.is_dir():
        others = sorted(p.name for p in exchange.iterdir() if p.is_dir())
        if others:
            problems.append(f"nothing was released for the course {course_id!r}, but the exchange holds "
                            f"{', '.join(others)}: students' nbgrader_config.py and the instructor's must name the "
                            f"same c.CourseDirectory.course_id")
        return problems
    for folder, need, what in ((course, 0o005, "enter it"), (course / "inbound", 0o003, "submit into it"),
                               (course / "outbound", 0o005, "list it"), (course / "feedback", 0o001, "fetch from it")):
        if folder.is_dir() and folder.stat().st_mode & need != need:
            problems.append(f"students cannot {what}: {folder} is {oct(folder.stat().st_mode & 0o777)[2:]}; "
                            f"sudo chmod o+{'rwx'[1:] if need == 0o003 else 'rx' if need == 0o005 else 'x'} {folder}")
    outbound = course / "outbound"
    for drop in sorted(outbound.iterdir()) if outbound.is_dir() else []:
        closed = [p for p in [drop, *drop.rglob("*")]
                  if p.stat().st_mode & (0o005 if p.is_dir() else 0o004) != (0o005 if p.is_dir() else 0o004)]
        if closed:
            problems.append(f"{drop.name} is released but students cannot read {len(closed)} of its files "
                            f"(first: {closed[0]}), so the tab cannot fetch it: sudo chmod -R o+rX {drop}, or "
                            f"release it again with a umask of 022 (python -m autograder.exchange release --force "
                            f"{drop.name})")
    return problems


class Hub:
    """A running hub: `jupyterhub -f hub/jupyterhub_config.py` in its state folder, its log in
    <state>/jupyterhub.log; `api(...)` calls its REST API with the class service's token."""

    def __init__(self, settings: dict, done: Install, wait: float = 120):
        self.settings, self.state = settings, Path(settings["state"])
        self.log = self.state / "jupyterhub.log"
        env = {**os.environ, "THREEAXES_HUB_SETTINGS": str(self.state / "settings.json")}
        env["PATH"] = os.pathsep.join([str(done.venv / "bin"), env.get("PATH", "")])
        for var in [v for v in env if v.startswith("JUPYTER") or v == "PYTHONPATH"]:
            del env[var]
        env["THREEAXES_HUB_SETTINGS"] = str(self.state / "settings.json")
        self.token = (self.state / "api_token").read_text().strip()
        self.started = time.perf_counter()
        self.process = subprocess.Popen([str(done.jupyterhub), "-f", str(HUB / "jupyterhub_config.py")],
                                        cwd=self.state, env=env, stdout=self.log.open("a"),
                                        stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HubError(f"jupyterhub exited ({self.process.returncode}); its log, {self.log}:\n"
                               + self.log.read_text()[-4000:])
            try:
                self.api("GET", "/")
                self.start_seconds = time.perf_counter() - self.started
                return
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise HubError(f"jupyterhub did not answer within {wait:.0f} s; its log, {self.log}:\n"
                       + self.log.read_text()[-4000:])

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.settings["ip"] in ("", "0.0.0.0") else self.settings["ip"]
        return f"http://{host}:{self.settings['port']}"

    def request(self, method: str, path: str, body=None, timeout: float = 120, raw: bool = False):
        """`path` under the hub's URL (/hub/api/..., /user/<name>/...), with the service token."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            text = reply.read().decode()
        if raw:
            return text
        return json.loads(text) if text.strip() else None

    def api(self, method: str, path: str, body=None, timeout: float = 120):
        return self.request(method, "/hub/api" + path, body, timeout)

    def spawn(self, name: str, wait: float = 180) -> float:
        """Start `name`'s server through the REST API; seconds until it answers."""
        t0 = time.perf_counter()
        try:
            self.api("POST", f"/users/{name}/server")
        except urllib.error.HTTPError as error:
            if error.code != 400:   # 400: already running
                raise
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            user = self.api("GET", f"/users/{name}")
            server = (user.get("servers") or {}).get("")
            if server and server.get("ready"):
                return time.perf_counter() - t0
            if not server or not server.get("pending"):
                if not server:
                    raise HubError(f"{name}'s server stopped while starting; the hub's log, {self.log}:\n"
                                   + self.log.read_text()[-3000:])
            time.sleep(0.3)
        raise HubError(f"{name}'s server did not start within {wait:.0f} s; see {self.log}")

    def stop(self) -> None:
        """SIGTERM: the hub stops the users' servers and its proxy, then exits."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m autograder.hub", description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("install", help="jupyterhub and configurable-http-proxy, pinned, into a cache")
    check = steps.add_parser("check", help="what in the exchange keeps students from listing, fetching or submitting")
    check.add_argument("--exchange", type=Path, default=None, help="default: the hub's, <state>/exchange")
    start = steps.add_parser("start", help="start the class's hub (Ctrl-C stops it and the users' servers)")
    start.add_argument("--students", default="student1,student2,student3",
                       help="comma-separated login names (default: %(default)s)")
    start.add_argument("--instructor", default="instructor")
    start.add_argument("--course", type=Path, default=ROOT, help="the course folder (default: this repository)")
    start.add_argument("--state", type=Path, default=None, help="the hub's database, exchange and configs "
                       "(default: /srv/threeaxes-hub as root, ~/.local/share/threeaxes-hub otherwise)")
    start.add_argument("--ip", default="127.0.0.1", help="0.0.0.0 to serve the class on every interface")
    start.add_argument("--port", type=int, default=8000)
    start.add_argument("--demo", action="store_true", help="the demo login (shared passwords) even as root")
    start.add_argument("--create-users", action="store_true",
                       help="as root: add the accounts that do not exist, passwords in <state>/passwords.txt")
    args = parser.parse_args(argv)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))   # stop the hub too
    accounts = is_root() and not getattr(args, "demo", False)
    if args.step == "check":
        exchange = args.exchange or default_state() / "exchange"
        problems = check_exchange(exchange)
        print("\n".join(problems) or f"the exchange {exchange} is ready: every student can list, fetch and submit")
        return 1 if problems else 0
    done = install(accounts)
    if args.step == "install":
        print(f"jupyterhub: {done.jupyterhub}\nconfigurable-http-proxy: {done.proxy}")
        return 0
    cfg = Settings(state=args.state or default_state(), students=[s for s in args.students.split(",") if s],
                   instructor=args.instructor, course=args.course, accounts=accounts, ip=args.ip, port=args.port)
    settings = prepare(cfg, done, create_users=args.create_users)
    hub = Hub(settings, done)
    sys.stdout.reconfigure(line_buffering=True)
    print(f"the class's hub is at {hub.url} (started in {hub.start_seconds:.1f} s; log: {hub.log})")
    print(f"exchange: {settings['exchange']}; course: {settings['course']}")
    if accounts:
        print(f"users log in with their Unix passwords ({cfg.instructor}: formgrader; "
              f"{', '.join(cfg.students)}: Assignments tab)")
    else:
        pw = json.loads((Path(settings["state"]) / "passwords.json").read_text())
        print(f"demo login (SharedPasswordAuthenticator): {', '.join(cfg.students)} with password "
              f"{pw['students']}; {cfg.instructor} with {pw['instructor']}")
    print(f"release a drop from the course folder: .../python -m autograder.exchange release DROP; Ctrl-C stops")
    try:
        hub.process.wait()
    except KeyboardInterrupt:
        hub.stop()
    return hub.process.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
