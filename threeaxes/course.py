"""Facts about the course kept in one place: where the repository lives, and
the install cell that opens every released notebook.

`INSTALL_CELL` is stamped into the first cell of every notebook by
`autograder.release`; a test checks that each committed notebook carries
exactly this text, so changing the URL here (for a fork) and running
`make release` updates every notebook.
"""
REPO_URL = "https://github.com/three-axes/three-axes"

# The pip requirement used when `threeaxes` is not importable (Colab, a bare
# kernel). THREEAXES_PIP_SPEC overrides it, e.g. with a local checkout's path.
PIP_SPEC = f"threeaxes @ git+{REPO_URL}"

INSTALL_CELL = f'''\
# Setup: installs the course package when it is missing (Colab, a fresh kernel).
# On a machine set up with `make lab` this does nothing.
try:
    import threeaxes
except ImportError:
    import os, subprocess, sys
    spec = os.environ.get("THREEAXES_PIP_SPEC", "{PIP_SPEC}")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", spec])
    import threeaxes'''
