"""`make hub`: python -m autograder.apps.hub install | check | stage DIR | start [options]."""
from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path
from typing import cast

from autograder.apps.hub import DESCRIPTION
from autograder.apps.hub.exchange_check import check_exchange
from autograder.apps.hub.installer import ROOT, install
from autograder.apps.hub.machine import is_root
from autograder.apps.hub.process import Hub
from autograder.apps.hub.settings import Settings, default_state, prepare
from autograder.apps.hub.staging import stage


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m autograder.apps.hub", description=DESCRIPTION)
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("install", help="jupyterhub and configurable-http-proxy, pinned, into a cache")
    check = steps.add_parser("check", help="what in the exchange keeps students from listing, fetching or submitting")
    check.add_argument("--exchange", type=Path, default=None, help="default: the hub's, <state>/exchange")
    staging = steps.add_parser("stage", help="copy what the users' servers import where every account can read "
                               "it (for a clone in a private folder); then start with --env DIR")
    staging.add_argument("folder", type=Path, help="a folder outside the clone, e.g. /srv/threeaxes-course")
    start = steps.add_parser("start", help="start the class's hub (Ctrl-C stops it and the users' servers)")
    start.add_argument("--students", default="student1,student2,student3",
                       help="comma-separated login names (default: %(default)s)")
    start.add_argument("--instructor", default="instructor")
    start.add_argument("--course", type=Path, default=ROOT, help="the course folder (default: this repository)")
    start.add_argument("--state", type=Path, default=None, help="the hub's database, exchange and configs "
                       "(default: /srv/threeaxes-hub as root, ~/.local/share/threeaxes-hub otherwise)")
    start.add_argument("--env", type=Path, default=None,
                       help="the course's environment as `stage` copied it (default: this .venv)")
    start.add_argument("--ip", default="127.0.0.1", help="0.0.0.0 to serve the class on every interface")
    start.add_argument("--port", type=int, default=8000)
    start.add_argument("--demo", action="store_true", help="the demo login (shared passwords) even as root")
    start.add_argument("--create-users", action="store_true",
                       help="as root: add the accounts that do not exist, passwords in <state>/passwords.txt")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    import signal

    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))   # stop the hub too
    accounts = is_root() and not getattr(args, "demo", False)
    if args.step == "check":
        exchange = args.exchange or default_state() / "exchange"
        problems = check_exchange(exchange)
        print("\n".join(problems) or f"the exchange {exchange} is ready: every student can list, fetch and submit")
        return 1 if problems else 0
    if args.step == "stage":
        env = stage(args.folder)
        print(f"staged: {env.site}; start the hub with --env {args.folder}")
        return 0
    done = install(accounts)
    if args.step == "install":
        print(f"jupyterhub: {done.jupyterhub}\nconfigurable-http-proxy: {done.proxy}")
        return 0
    cfg = Settings(state=args.state or default_state(), students=[s for s in args.students.split(",") if s],
                   instructor=args.instructor, course=args.course, accounts=accounts, ip=args.ip, port=args.port,
                   env=args.env)
    settings = prepare(cfg, done, create_users=args.create_users)
    hub = Hub(settings, done)
    cast(io.TextIOWrapper, sys.stdout).reconfigure(line_buffering=True)   # typeshed: a TextIO
    print(f"the class's hub is at {hub.url} (started in {hub.start_seconds:.1f} s; log: {hub.log})")
    print(f"exchange: {settings['exchange']}; course: {settings['course']}")
    if accounts:
        print(f"users log in with their Unix passwords ({cfg.instructor}: formgrader; "
              f"{', '.join(cfg.students)}: Assignments tab)")
    else:
        pw = json.loads((Path(settings["state"]) / "passwords.json").read_text())
        print(f"demo login (SharedPasswordAuthenticator): {', '.join(cfg.students)} with password "
              f"{pw['students']}; {cfg.instructor} with {pw['instructor']}")
    print("release a drop from the course folder: .../python -m autograder.apps.exchange release DROP; Ctrl-C stops")
    try:
        hub.process.wait()
    except KeyboardInterrupt:
        hub.stop()
    return hub.process.returncode or 0


if __name__ == "__main__":
    sys.exit(main())
