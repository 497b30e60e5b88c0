"""JupyterHub for one class of the course: `make hub` writes <state>/settings.json and starts
`jupyterhub -f hub/jupyterhub_config.py` with THREEAXES_HUB_SETTINGS naming it
(autograder/apps/hub/settings.py says what each setting is). On a course machine of your own, the
same file works once you fill in settings.json, or copy the lines you need.
"""
import json
import os
import pwd
from pathlib import Path

c = get_config()  # noqa: F821 (provided by JupyterHub)
s = json.loads(Path(os.environ["THREEAXES_HUB_SETTINGS"]).read_text())
state = Path(s["state"])

# -- the hub, its proxy, and what survives a restart ----------------------------------
c.JupyterHub.ip = s["ip"]
c.JupyterHub.port = s["port"]
c.JupyterHub.hub_ip = "127.0.0.1"
c.JupyterHub.hub_port = s["hub_port"]
c.ConfigurableHTTPProxy.command = [s["proxy"]]
c.ConfigurableHTTPProxy.api_url = f"http://127.0.0.1:{s['proxy_api_port']}"
c.ConfigurableHTTPProxy.pid_file = str(state / "proxy.pid")
# the database and the cookie secret live in the state folder, so a hub restarted in the
# middle of a class knows its users and their logins; their servers are stopped with it
# and start again on their next visit (what is in their homes and the exchange stays)
c.JupyterHub.db_url = f"sqlite:///{state / 'jupyterhub.sqlite'}"
c.JupyterHub.cookie_secret_file = str(state / "jupyterhub_cookie_secret")
c.JupyterHub.cleanup_servers = True
c.JupyterHub.log_level = s.get("log_level", "INFO")

# -- who may log in ----------------------------------------------------------------
c.Authenticator.allowed_users = set(s["students"]) | {s["instructor"]}
c.Authenticator.admin_users = {s["instructor"]}
if s["mode"] == "accounts":
    # real Unix accounts, their own passwords (PAM); each server runs as its user
    c.JupyterHub.authenticator_class = "pam"
    c.JupyterHub.spawner_class = "localprocess"
else:
    # JupyterHub's demo setup: one shared password for students, another for the instructor,
    # every user a folder of their own under homes/ but one system user (no isolation)
    c.JupyterHub.authenticator_class = "shared-password"
    c.SharedPasswordAuthenticator.user_password = s["passwords"]["students"]
    c.SharedPasswordAuthenticator.admin_password = s["passwords"]["instructor"]
    c.JupyterHub.spawner_class = "simple"
    c.SimpleLocalProcessSpawner.home_dir_template = str(state / "homes" / "{username}")
root_args = ["--allow-root"] if s["mode"] == "demo" and os.geteuid() == 0 else []

# a service whose token the course's tests and benchmarks use (the hub's REST API, and the
# users' servers as nbgrader's Assignments tab calls them); readable by the hub's owner only
c.JupyterHub.services = [{"name": "threeaxes-class", "api_token": (state / "api_token").read_text().strip()}]
c.JupyterHub.load_roles = [{"name": "threeaxes-class", "services": ["threeaxes-class"],
                            "scopes": ["admin:users", "admin:servers", "access:servers", "read:users"]}]

# -- every user's server: JupyterLab from the course's environment -------------------
c.Spawner.cmd = [s["python"], str(state / "singleuser.py")]
c.Spawner.default_url = "/lab"
c.Spawner.args = [*root_args, *s.get("server_args", [])]   # e.g. the browser test's expose_app_in_browser
c.Spawner.start_timeout = 120      # a loaded 2-core machine takes 10 to 30 s to start JupyterLab
c.Spawner.http_timeout = 120


def refuse(message: str):
    """An error the hub shows the user as it is (the spawn page, the REST API's reply) and logs
    without a traceback: what is wrong and the command that fixes it."""
    from tornado import web

    error = web.HTTPError(500, "%s", message)
    error.jupyterhub_message = message
    return error


def role_environment(spawner):
    """The instructor's server: the formgrader, course list and assignment list, on the course
    folder; a student's: the assignment list only, on their home. Refuses, saying what to fix,
    what would leave the server broken (the message shows on the page the user waits on)."""
    name = spawner.user.name
    role = "instructor" if name == s["instructor"] else "student"
    env = {
        "JUPYTER_CONFIG_PATH": os.pathsep.join([str(state / "jupyter" / role), s["course_config"]]),
        "JUPYTER_PATH": s["course_data"],
        "JUPYTERLAB_DIR": s["course_lab"],
        "PATH": os.pathsep.join([str(Path(s["python"]).parent), "/usr/local/bin", "/usr/bin", "/bin"]),
        "THREEAXES_EXCHANGE": s["exchange"],
        # the course's packages, as the hub's venv reads them (autograder/apps/hub/installer.py): the
        # .venv, or the copy `python -m autograder.apps.hub stage` made where every account can read it
        "THREEAXES_COURSE_SITE": s.get("course_site", ""),
        "THREEAXES_ROLE": role,
    }
    if role == "instructor":
        env["THREEAXES_HUB_CWD"] = s["course"]          # the gradebook's path is relative to it
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([s["course"], s["code"]]))   # autograder/
        spawner.notebook_dir = s["course"]
    spawner.environment.update(env)
    if s["mode"] == "accounts":
        try:
            home = Path(pwd.getpwnam(name).pw_dir)
        except KeyError:
            raise refuse(f"{name} has no Unix account on this machine: add it (useradd -m {name}; "
                               f"passwd {name}) or take it off the class list") from None
        if not home.is_dir():
            raise refuse(f"{name}'s home folder {home} does not exist: mkdir -p {home} && "
                               f"chown {name}: {home} (as root), then start the server again")
    exchange = Path(s["exchange"])
    if not exchange.is_dir() or (exchange.stat().st_mode & 0o777) != 0o777:
        raise refuse(f"the exchange {exchange} is missing or not writable by every user, so "
                           f"fetching and submitting would fail: sudo mkdir -p {exchange} && sudo chmod "
                           f"ugo+rwx {exchange} (nothing in it is lost), then start the server again")


c.Spawner.pre_spawn_hook = role_environment
