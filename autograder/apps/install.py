"""`pip install` into this Python's environment, unpacked by uv where it can be: what the Makefile's
installs and the hub's run (`python -m autograder.apps.install -r requirements.txt -c constraints.txt`).

pip unpacks one file after another on one core, and torch is 700 MB of them: on 2 cores, pip took
38 s over a fresh `make lab`'s requirements, uv 14 s (and 5 s to install uv). uv does not read pip's
configuration (pip.conf, PIP_* variables), so `uv_settings` hands it what pip would use: the indexes,
find-links, constraints, certificate and timeout. Where pip's configuration says anything else, where
uv cannot be installed, or where it fails, pip installs as before, so a machine behind its own index
or proxy gets what pip would have given it. THREEAXES_INSTALLER=pip always uses pip.
"""
from __future__ import annotations

import ast
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

from autograder.course import ROOT

CONSTRAINTS = ROOT / "constraints.txt"

# pip settings uv is given, as (uv option, one value or several); the rest below change nothing
# about what is installed
LISTS = {"extra-index-url": "--extra-index-url", "find-links": "--find-links", "constraint": "--constraint"}
SINGLE = {"index-url": "--index-url"}
HARMLESS = {"disable-pip-version-check", "cert", "default-timeout", "timeout", "no-cache-dir", "cache-dir",
            "progress-bar", "quiet", "verbose", "no-color", "root-user-action", "no-compile", "no-input"}
# what applies to pip install, a later section winning: pip.conf's [global], its [install], then
# PIP_* variables (a section for another command, [freeze] say, changes nothing here)
PRECEDENCE = ("global", "install", ":env:")


def pip_settings() -> dict[str, str] | None:
    """{setting: value} as this environment's pip would apply them to `pip install`, from
    `pip config list`; None where pip cannot say."""
    done = subprocess.run([*_pip(), "config", "list"], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    found: dict[str, dict[str, str]] = {}
    for line in done.stdout.splitlines():
        name, _, value = line.partition("=")
        section, _, key = name.rpartition(".")
        try:
            found.setdefault(section, {})[key] = str(ast.literal_eval(value))
        except (ValueError, SyntaxError):
            return None
    settings: dict[str, str] = {}
    for section in PRECEDENCE:
        settings.update(found.get(section, {}))
    return settings


def uv_settings(settings: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """(uv options, environment) meaning what `settings` mean to pip; None where one of them has
    no meaning this translation knows (a trusted host, a proxy, a client certificate, no-index...)."""
    if set(settings) - set(LISTS) - set(SINGLE) - HARMLESS:
        return None
    options, env = [], {}
    for key, option in SINGLE.items():
        if key in settings:
            options += [option, settings[key]]
    for key, option in LISTS.items():
        for value in settings.get(key, "").split():
            options += [option, value]
    if "cert" in settings:
        env["SSL_CERT_FILE"] = settings["cert"]
    timeout = settings.get("default-timeout") or settings.get("timeout")
    if timeout:
        env["UV_HTTP_TIMEOUT"] = timeout
    return options, env


def _pip(into: str | None = None) -> list[str]:
    """This environment's pip, installing for the Python `into` (this one by default). The Makefile
    makes the venv without pip (ensurepip spends 7 s installing and compiling one), so the first call
    has the base Python's pip install one, uncompiled, or where that pip cannot (none, or older than
    22.3), ensurepip."""
    if importlib.util.find_spec("pip") is None:
        base = getattr(sys, "_base_executable", sys.executable)
        if subprocess.run([base, "-m", "pip", "--python", sys.executable, "install", "-q", "--no-compile", "pip"],
                          capture_output=True).returncode != 0:
            subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade"], capture_output=True, check=True)
        importlib.invalidate_caches()
    return [sys.executable, "-m", "pip", *(["--python", into] if into else [])]


def _uv() -> Path | None:
    """This environment's uv, installed (at constraints.txt's pin) on first use; None where pip
    cannot install it."""
    uv = Path(sys.executable).parent / "uv"
    if not uv.exists():
        done = subprocess.run([*_pip(), "install", "-q", "--no-compile", "uv",
                               "-c", str(CONSTRAINTS)], capture_output=True, text=True)
        if done.returncode != 0 or not uv.exists():
            print(f"uv could not be installed, pip installs instead:\n{done.stderr[-1000:]}", file=sys.stderr)
            return None
    return uv


def install(args: list[str], target: str | None = None) -> int:
    """`pip install *args` into this Python's environment, or `target`'s (a Python of another,
    which needs no pip of its own), by uv or pip as the module docstring says; the exit status."""
    settings = None if os.environ.get("THREEAXES_INSTALLER") == "pip" else pip_settings()
    translated = uv_settings(settings) if settings is not None else None
    uv = _uv() if translated is not None else None
    if translated is not None and uv is not None:
        options, env = translated
        # pip compiles what it installs unless told not to; uv only when told to (on every core)
        wanted = [a for a in args if a != "--no-compile"] + ([] if "--no-compile" in args else ["--compile-bytecode"])
        # pip takes the best match over all indexes; uv's default (the first index that has the
        # name) could pick another file where indexes disagree
        done = subprocess.run([str(uv), "pip", "install", "--python", target or sys.executable,
                               "--index-strategy", "unsafe-best-match", *options, *wanted], env={**os.environ, **env})
        if done.returncode == 0:
            return 0
        print("uv could not install that (above), pip installs instead", file=sys.stderr)
    return subprocess.run([*_pip(target), "install", *args]).returncode


def main(argv: list[str]) -> int:
    """pip install's arguments, and `--target-python PYTHON` for `install`'s `target`."""
    target = None
    if "--target-python" in argv:
        at = argv.index("--target-python")
        target, argv = argv[at + 1], argv[:at] + argv[at + 2:]
    return install(argv, target)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
