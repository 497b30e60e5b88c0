"""A user's server on the course's hub: jupyterhub-singleuser (JupyterLab), started in the
course folder for the instructor (the gradebook's path in nbgrader_config.py is relative to
it). Before it starts, it says in the hub's log what would break the Assignments tab."""
import os
import sys

cwd = os.environ.get("THREEAXES_HUB_CWD")
if cwd:
    os.chdir(cwd)
exchange = os.environ.get("THREEAXES_EXCHANGE")
user = os.environ.get("JUPYTERHUB_USER", "?")
if exchange and not os.access(exchange, os.W_OK | os.X_OK):
    print(f"[threeaxes] {user} cannot write to the exchange {exchange}: the Assignments tab will fail to "
          f"fetch and submit. Fix: sudo chmod ugo+rwx {exchange}", file=sys.stderr, flush=True)

from jupyterhub.singleuser import main  # noqa: E402

sys.exit(main())
