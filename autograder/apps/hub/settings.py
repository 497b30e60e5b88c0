"""One class's settings, written where the hub reads them: each role's nbgrader and extension
configs, the exchange, the accounts or the demo's passwords, and <state>/settings.json, which
hub/jupyterhub_config.py reads."""
from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autograder.apps.hub.installer import HUB, ROOT, Install
from autograder.apps.hub.machine import HubError, free_port, has_account, is_root, make_account, open_to_all, pwd_entry
from autograder.apps.hub.staging import staged_env, this_env

COURSE_ID = "three-axes"
STUDENT_SERVER = ["nbgrader.server_extensions.assignment_list"]
INSTRUCTOR_SERVER = [*STUDENT_SERVER, "nbgrader.server_extensions.formgrader",
                     "nbgrader.server_extensions.course_list"]
# the lab plugins a student's page leaves out (nbgrader's table: students get the assignment list)
STUDENT_LAB_OFF = ["@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment",
                   "@jupyter/nbgrader:course-list", "@jupyterlab/apputils-extension:announcements"]
INSTRUCTOR_LAB_OFF = ["@jupyterlab/apputils-extension:announcements"]


def default_state() -> Path:
    if is_root():
        return Path("/srv/threeaxes-hub")
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / "threeaxes-hub"


def _nbgrader_config(lines: list[str]) -> str:
    return "\n".join(["# written by python -m autograder.apps.hub: every user of the class's hub reads this",
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
    env: Path | None = None      # a staged copy of the course's environment (staging.py); None: this .venv

    @property
    def exchange(self) -> Path:
        return self.state / "exchange"


def _check_accounts(cfg: Settings, course: Path, site: Path, create_users: bool, state: Path) -> dict:
    """Real accounts: each user has one (or gets one, with a password returned), the course folder
    is the instructor's, and every account can read the course's packages."""
    passwords = {}
    missing = [u for u in [*cfg.students, cfg.instructor] if not has_account(u)]
    if missing and not create_users:
        raise HubError(f"no Unix account for {', '.join(missing)}: add them (useradd -m NAME; passwd NAME), "
                       f"or run again with --create-users, which adds them with passwords in "
                       f"{state / 'passwords.txt'} (readable by root only)")
    for name in missing:
        passwords[name] = secrets.token_urlsafe(9)
        make_account(name, passwords[name])
    if course.stat().st_uid != pwd_entry(cfg.instructor).pw_uid:
        raise HubError(f"the course folder {course} must belong to the instructor's account {cfg.instructor} "
                       f"(their server grades and writes the gradebook there): clone the course into their "
                       f"home (sudo -u {cfg.instructor} git clone ...) and pass --course, or "
                       f"chown -R {cfg.instructor}: {course}")
    if not open_to_all(site):
        raise HubError(f"the students' servers run as their own accounts and cannot read the course's "
                       f"packages in {site}: make the folders above it readable (chmod o+rx), or copy "
                       f"what the servers need where they can read it (python -m autograder.apps.hub stage "
                       f"/srv/threeaxes-course) and start with --env /srv/threeaxes-course")
    return passwords


def _demo_homes(cfg: Settings, state: Path) -> dict:
    """The demo login: its two passwords (kept across restarts) and a home per user."""
    passwords = {"students": secrets.token_urlsafe(12), "instructor": secrets.token_urlsafe(33)}
    saved = state / "passwords.json"
    if saved.exists():
        passwords = json.loads(saved.read_text())
    for name in [*cfg.students, cfg.instructor]:
        # one system user for all: nbgrader would take its name as every student's id, so each
        # home's own nbgrader config names its student (README: the exchange on one account)
        (state / "homes" / name / ".jupyter").mkdir(parents=True, exist_ok=True)
        (state / "homes" / name / ".jupyter" / "nbgrader_config.py").write_text(
            _nbgrader_config([f"c.CourseDirectory.student_id = {name!r}"]))
    return passwords


def prepare(cfg: Settings, done: Install, create_users: bool = False,
            log: Callable[[str], object] = print) -> dict:
    """Everything the hub reads, checked: the state folder, the exchange, the role configs,
    the accounts (or the demo passwords); returns settings.json's content."""
    state = cfg.state.resolve()
    state.mkdir(parents=True, exist_ok=True)
    state.chmod(0o755)
    course = cfg.course.resolve()
    if not (course / "nbgrader_config.py").is_file():
        raise HubError(f"{course} is not the course folder (no nbgrader_config.py): pass --course <your clone>")
    env = staged_env(cfg.env) if cfg.env else this_env()
    if cfg.env and not (env.site / "threeaxes").is_dir():
        raise HubError(f"{cfg.env} holds no staged course environment: python -m autograder.apps.hub stage {cfg.env}")
    exchange = state / "exchange"
    exchange.mkdir(exist_ok=True)
    exchange.chmod(0o777)       # nbgrader's exchange: every user writes their submissions into it
    if cfg.accounts:
        passwords = _check_accounts(cfg, course, env.site, create_users, state)
    else:
        passwords = _demo_homes(cfg, state)
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
    settings = {
        "mode": "accounts" if cfg.accounts else "demo", "state": str(state), "ip": cfg.ip, "port": cfg.port,
        "hub_port": free_port(), "proxy_api_port": free_port(), "proxy": str(done.proxy),
        "python": str(done.python), "students": list(cfg.students), "instructor": cfg.instructor,
        "course": str(course), "exchange": str(exchange), "course_site": str(env.site),
        "course_config": str(env.config), "course_data": str(env.data), "course_lab": str(env.data / "lab"),
        "passwords": passwords if not cfg.accounts else {}, "server_args": list(cfg.server_args),
        "code": str(ROOT),
    }
    (state / "settings.json").write_text(json.dumps(settings, indent=1) + "\n")
    (state / "settings.json").chmod(0o600)
    return settings
