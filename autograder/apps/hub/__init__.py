"""A JupyterHub for one class on this machine: `make hub` (python -m autograder.apps.hub start).

    python -m autograder.apps.hub install          jupyterhub and configurable-http-proxy, pinned in hub/,
                                              into a cache (never into .venv, never by make lab)
    python -m autograder.apps.hub check            what in the exchange keeps students out
    python -m autograder.apps.hub stage DIR        the course's environment where every account can read it
    python -m autograder.apps.hub start [--students a,b] [--instructor NAME] [--port 8000] [--ip 0.0.0.0]
                                   [--state DIR] [--course DIR] [--env DIR] [--demo] [--create-users]

`start` runs the hub and configurable-http-proxy; every user's server is JupyterLab from the
course's environment, with nbgrader's extensions as nbgrader documents for a hub (students the
assignment list, the instructor the formgrader and course list too), an exchange every user can
write to, and either real Unix accounts (as root) or the hub's demo login. Anything that would
break the class (no Node, a closed exchange, a missing account) stops it with the fix.

Modules, bottom to top: machine (accounts, permissions), installer (the pinned hub in a cache),
staging (the course's environment, or a readable copy of it), settings (one class's configs),
exchange_check, process (a running hub), __main__ (the command).
"""
from autograder.apps.hub.exchange_check import check_exchange
from autograder.apps.hub.installer import HUB, ROOT, Install, cache_root, install, pins
from autograder.apps.hub.machine import (
                                    HubError,
                                    course_site,
                                    free_port,
                                    has_account,
                                    is_root,
                                    make_account,
                                    open_to_all,
                                    pwd_entry,
)
from autograder.apps.hub.process import Hub
from autograder.apps.hub.settings import COURSE_ID, Settings, default_state, prepare, write_role_configs
from autograder.apps.hub.staging import CourseEnv, stage, staged_env, this_env

DESCRIPTION = "A JupyterHub for one class on this machine (make hub)."

__all__ = ["COURSE_ID", "DESCRIPTION", "HUB", "ROOT", "CourseEnv", "Hub", "HubError", "Install", "Settings",
           "cache_root", "check_exchange", "course_site", "default_state", "free_port", "has_account", "install",
           "is_root", "make_account", "open_to_all", "pins", "prepare", "pwd_entry", "stage", "staged_env",
           "this_env", "write_role_configs"]
