"""The class's hub without starting it (the hub itself, in a browser: tests/browser/test_hub_class.py):
its pins, what each role's server is given, the demo login's per-student ids, and what
`python -m autograder.apps.hub check` says about an exchange students cannot use."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

from autograder.apps import hub

ROOT = Path(__file__).resolve().parents[2]


def test_the_hub_and_its_proxy_are_pinned_in_hub_and_never_in_the_students_environment():
    pins = hub.pins()
    assert pins == {"jupyterhub": "6.1.1", "configurable-http-proxy": "5.3.0"}
    lock = json.loads((ROOT / "hub" / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/configurable-http-proxy"]["version"] == pins["configurable-http-proxy"]
    pinned = [line for line in (ROOT / "hub" / "requirements.txt").read_text().splitlines()
              if line and not line.startswith("#")]
    assert all("==" in line for line in pinned), pinned
    for student_side in ("requirements.txt", "requirements-dev.txt", "constraints.txt", "environment.yml"):
        assert "jupyterhub" not in (ROOT / student_side).read_text().lower(), student_side


def test_each_role_gets_the_extensions_nbgrader_documents_for_a_hub(tmp_path):
    hub.write_role_configs(tmp_path, tmp_path / "exchange", ROOT)

    def role(name):
        folder = tmp_path / "jupyter" / name
        server = json.loads((folder / "jupyter_server_config.json").read_text())["ServerApp"]["jpserver_extensions"]
        lab = json.loads((folder / "labconfig" / "page_config.json").read_text())["disabledExtensions"]
        config = (folder / "nbgrader_config.py").read_text()
        return {k.rsplit(".", 1)[1] for k, on in server.items() if on}, set(lab), config

    server, lab_off, config = role("student")
    assert server == {"assignment_list"}
    assert {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:course-list",
            "@jupyter/nbgrader:create-assignment"} <= lab_off
    assert "@jupyter/nbgrader:assignment-list" not in lab_off
    assert f"c.Exchange.root = {str(tmp_path / 'exchange')!r}" in config and "three-axes" in config
    assert "CourseDirectory.root" not in config
    server, lab_off, config = role("instructor")
    assert server == {"assignment_list", "formgrader", "course_list"}
    assert not any("nbgrader" in name for name in lab_off)
    assert f"c.CourseDirectory.root = {str(ROOT)!r}" in config
    assert "check_owner" not in config          # real accounts: collect's owner check stays on


def test_the_demo_login_gives_each_student_an_id_of_their_own(tmp_path):
    """SimpleLocalProcessSpawner runs everyone as one system user, whose name nbgrader would
    take as every student's id: each home names its student instead."""
    done = hub.Install(tmp_path / "venv", tmp_path / "proxy")
    cfg = hub.Settings(state=tmp_path / "state", students=["ada", "bo"], instructor="teach", course=ROOT,
                       accounts=False)
    settings = hub.prepare(cfg, done)
    state = Path(settings["state"])
    assert settings["mode"] == "demo" and settings["students"] == ["ada", "bo"]
    for name in ("ada", "bo"):
        text = (state / "homes" / name / ".jupyter" / "nbgrader_config.py").read_text()
        assert f"c.CourseDirectory.student_id = {name!r}" in text
    assert "check_owner = False" in (state / "jupyter" / "instructor" / "nbgrader_config.py").read_text()
    passwords = json.loads((state / "passwords.json").read_text())
    assert len(passwords["students"]) >= 8 and len(passwords["instructor"]) >= 32   # the authenticator's minimums
    for secret in ("passwords.json", "api_token", "settings.json"):
        assert (state / secret).stat().st_mode & 0o077 == 0, secret
    assert (state / "exchange").stat().st_mode & 0o777 == 0o777


def test_an_exchange_students_cannot_use_is_named_with_its_fix(tmp_path):
    exchange = tmp_path / "exchange"
    assert "sudo mkdir -p" in hub.check_exchange(exchange)[0]
    exchange.mkdir()
    exchange.chmod(0o755)
    assert any("chmod ugo+rwx" in p for p in hub.check_exchange(exchange))
    exchange.chmod(0o777)
    (exchange / "other-course").mkdir()
    assert any("course_id" in p for p in hub.check_exchange(exchange))
    drop = exchange / "three-axes" / "outbound" / "drop01-three-kinds-of-parallel"
    drop.mkdir(parents=True)
    for folder in (exchange / "three-axes", drop.parent, drop):
        folder.chmod(0o755)
    (exchange / "three-axes" / "inbound").mkdir(mode=0o733)
    (exchange / "three-axes" / "inbound").chmod(0o733)
    notebook = drop / "drop01-three-kinds-of-parallel.ipynb"
    notebook.write_text("{}")
    notebook.chmod(0o644)
    assert hub.check_exchange(exchange) == []
    notebook.chmod(0o600)                       # released under umask 077: the tab cannot fetch it
    said = hub.check_exchange(exchange)
    assert len(said) == 1 and "chmod -R o+rX" in said[0] and drop.name in said[0]
    (exchange / "three-axes" / "inbound").chmod(0o700)
    assert any("cannot submit" in p for p in hub.check_exchange(exchange))


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_a_missing_node_stops_the_install_with_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setenv("THREEAXES_HUB_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(hub.HubError, match="apt-get install nodejs npm"):
        hub.install(accounts=False)


def test_staging_copies_what_the_servers_import_readable_by_all_and_no_grader(tmp_path, monkeypatch):
    """A clone in a private folder: its .venv is closed to the students' accounts, so `stage`
    copies it out, with the course package in place of the editable link back into the clone."""
    from autograder.apps.hub import staging

    private = tmp_path / "home"
    site, config, data = private / "site-packages", private / "etc" / "jupyter", private / "share" / "jupyter"
    (site / "somepkg").mkdir(parents=True)
    (site / "somepkg" / "__init__.py").write_text("X = 1\n")
    (site / "somepkg" / "__init__.py").chmod(0o600)          # installed under umask 077
    (site / "__editable__.threeaxes-0.1.0.pth").write_text(f"{ROOT}\n")
    (site / "__editable___threeaxes_0_1_0_finder.py").write_text("")
    (data / "lab" / "static").mkdir(parents=True)
    (data / "lab" / "static" / "index.js").write_text("")
    config.mkdir(parents=True)
    private.chmod(0o700)
    monkeypatch.setattr(staging, "this_env", lambda: hub.CourseEnv(site, config, data))
    with pytest.raises(hub.HubError, match="closed to other accounts"):    # pytest's tmp_path is 700
        hub.stage(tmp_path / "staged", log=lambda line: None)
    shared = Path(tempfile.mkdtemp(prefix="threeaxes-stage-test-"))
    shared.chmod(0o755)
    try:
        _check_staged(hub.stage(shared / "staged", log=lambda line: None), shared / "staged")
    finally:
        shutil.rmtree(shared)
    with pytest.raises(hub.HubError, match="outside the clone"):
        hub.stage(ROOT / "staged-here", log=lambda line: None)


def _check_staged(env, folder: Path) -> None:
    assert env == hub.staged_env(folder)
    assert (env.site / "somepkg" / "__init__.py").stat().st_mode & 0o004
    assert (env.site / "threeaxes" / "__init__.py").read_text() == (ROOT / "threeaxes" / "__init__.py").read_text()
    assert not list(env.site.glob("__editable__*")), "an editable install would point back into the clone"
    assert not (env.site / "autograder").exists() and not list(env.site.rglob("references"))
    assert (env.data / "lab" / "static" / "index.js").is_file()
    assert all(p.stat().st_mode & 0o005 == 0o005 for p in [folder, *env.site.rglob("*")] if p.is_dir())


def test_a_hub_started_on_an_unstaged_folder_says_how_to_stage_it(tmp_path):
    done = hub.Install(tmp_path / "venv", tmp_path / "proxy")
    cfg = hub.Settings(state=tmp_path / "state", students=["ada"], instructor="teach", course=ROOT,
                       accounts=False, env=tmp_path / "nothing")
    with pytest.raises(hub.HubError, match="autograder.apps.hub stage"):
        hub.prepare(cfg, done)


def test_the_hubs_python_sees_the_site_it_is_told(tmp_path, monkeypatch):
    """The hub's venv reads the course's packages through one .pth line; THREEAXES_COURSE_SITE,
    which the hub and every user's server are given, points it at a staged copy instead."""
    import sys

    from autograder.apps.hub.installer import SITE_VARIABLE, site_hook

    told, default = tmp_path / "told", tmp_path / "default"
    for folder in (told, default):
        folder.mkdir()
    monkeypatch.setattr(sys, "path", list(sys.path))
    monkeypatch.setenv(SITE_VARIABLE, str(told))
    exec(site_hook(default))
    assert str(told) in sys.path and str(default) not in sys.path
    monkeypatch.delenv(SITE_VARIABLE)
    exec(site_hook(default))
    assert str(default) in sys.path
