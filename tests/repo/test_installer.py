"""autograder/apps/install.py: the Makefile's and the hub's `pip install`, unpacked by uv only with
the settings pip itself would have used, and by pip wherever that cannot be said."""
import subprocess
import sys
from pathlib import Path

from autograder.apps import install

ROOT = Path(__file__).resolve().parents[2]


def test_pip_settings_are_pips_own_with_variables_over_install_over_global(tmp_path, monkeypatch):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nconstraint = /from/global\nextra-index-url = file:///a file:///b\n"
                    "[install]\nextra-index-url = file:///from/install\n"
                    "[freeze]\nexclude = pip\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))   # pip reads it after the machine's own files
    monkeypatch.setenv("PIP_FIND_LINKS", "/from/variable")
    settings = install.pip_settings()
    assert settings is not None
    assert settings["constraint"] == "/from/global"
    assert settings["extra-index-url"] == "file:///from/install"
    assert settings["find-links"] == "/from/variable"
    assert "exclude" not in settings, "a [freeze] setting is not pip install's"


def test_uv_is_given_each_setting_pip_would_use():
    options, env = install.uv_settings({
        "index-url": "https://mirror/simple", "extra-index-url": "file:///a file:///b",
        "find-links": "/wheels", "constraint": "/c.txt", "cert": "/ca.pem", "default-timeout": "180",
        "disable-pip-version-check": "1"})
    assert options == ["--index-url", "https://mirror/simple",
                       "--extra-index-url", "file:///a", "--extra-index-url", "file:///b",
                       "--find-links", "/wheels", "--constraint", "/c.txt"]
    assert env == {"SSL_CERT_FILE": "/ca.pem", "UV_HTTP_TIMEOUT": "180"}


def test_a_setting_uv_is_not_told_of_leaves_the_install_to_pip():
    for setting in ({"trusted-host": "mirror"}, {"no-index": "1"}, {"proxy": "http://proxy:3128"},
                    {"client-cert": "/me.pem"}):
        assert install.uv_settings(setting) is None, setting


class Recorder:
    """subprocess.run as install() calls it: each argv kept, uv answering `uv_rc`."""

    def __init__(self, uv_rc):
        self.uv_rc, self.calls = uv_rc, []

    def __call__(self, argv, **kwargs):
        self.calls.append([str(a) for a in argv])
        rc = self.uv_rc if str(argv[0]).endswith("uv") else 0
        return subprocess.CompletedProcess(argv, rc, "", "")


def _calls(monkeypatch, tmp_path, uv_rc):
    uv = tmp_path / "uv"
    uv.touch()
    monkeypatch.setattr(install, "pip_settings", lambda: {"find-links": "/wheels"})
    monkeypatch.setattr(install, "_uv", lambda: uv)
    run = Recorder(uv_rc)
    monkeypatch.setattr(install.subprocess, "run", run)
    status = install.install(["-q", "--no-compile", "-r", "req.txt"], target="/hub/bin/python")
    return status, run.calls


def test_uv_installs_into_the_target_without_compiling_where_pip_was_told_not_to(monkeypatch, tmp_path):
    status, calls = _calls(monkeypatch, tmp_path, uv_rc=0)
    assert status == 0 and len(calls) == 1, calls
    assert calls[0][1:] == ["pip", "install", "--python", "/hub/bin/python", "--index-strategy", "unsafe-best-match",
                            "--find-links", "/wheels", "-q", "-r", "req.txt"]


def test_where_uv_fails_pip_installs_the_same_into_the_same_python(monkeypatch, tmp_path):
    status, calls = _calls(monkeypatch, tmp_path, uv_rc=2)
    assert status == 0 and len(calls) == 2, calls
    assert calls[1] == [sys.executable, "-m", "pip", "--python", "/hub/bin/python",
                        "install", "-q", "--no-compile", "-r", "req.txt"]


def test_installer_pip_never_asks_uv(monkeypatch, tmp_path):
    monkeypatch.setenv("THREEAXES_INSTALLER", "pip")
    monkeypatch.setattr(install, "_uv", lambda: (_ for _ in ()).throw(AssertionError("uv asked for")))
    run = Recorder(uv_rc=0)
    monkeypatch.setattr(install.subprocess, "run", run)
    assert install.install(["-q", "x"]) == 0
    assert run.calls == [[sys.executable, "-m", "pip", "install", "-q", "x"]]


def test_a_venv_made_without_pip_gets_its_own_before_anything_is_installed(tmp_path):
    """The Makefile's venv has no pip (`--without-pip`): the base Python's pip gives it one."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    ask = "from autograder.apps import install; print(install._pip())"
    done = subprocess.run([python, "-c", ask], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == str([str(python), "-m", "pip"])
    own = subprocess.run([python, "-m", "pip", "--version"], capture_output=True, text=True)
    assert own.returncode == 0 and str(venv) in own.stdout, own.stdout + own.stderr
