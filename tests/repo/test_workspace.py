"""`make lab` works on the student's copy in work/: first run, later runs, reset,
the start page's links, student and instructor mode, hidden build folders.

Each test builds a small repository in tmp_path from the real notebooks/ and
release/, so the real checkout and its tracked files are never touched."""
import hashlib
import json
import re
import shutil
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from autograder.apps import workspace
from threeaxes.course import course_map_markdown

ROOT = Path(__file__).resolve().parents[2]
START = "notebooks/00-start-here.ipynb"
DROP = "drop05-data-parallel-trace"


def make_repo(path: Path) -> Path:
    for folder in ("notebooks", "release"):
        shutil.copytree(ROOT / folder, path / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    return path


def digest_of_tree(path: Path) -> dict[str, str]:
    files = sorted(p for p in path.rglob("*") if p.is_file())
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def tracked_digests(repo: Path) -> dict[str, str]:
    release = {"release/" + name: value for name, value in digest_of_tree(repo / "release").items()}
    return {**digest_of_tree(repo / "notebooks"), **release}


@pytest.fixture
def repo(tmp_path):
    return make_repo(tmp_path / "repo")


def test_first_run_copies_every_notebook_and_every_released_file(repo):
    report = workspace.sync(repo)
    expected = sorted(
        [p.relative_to(repo) for p in (repo / "notebooks").glob("*.ipynb")]
        + [p.relative_to(repo) for p in (repo / "release").rglob("*") if p.is_file()]
    )
    assert sorted(report.added) == expected and report.kept == []
    assert Path(START) in report.added and Path(f"release/{DROP}/{DROP}.ipynb") in report.added
    for rel in expected:
        assert (repo / "work" / rel).read_bytes() == (repo / rel).read_bytes(), rel


def test_a_later_run_adds_a_new_drop_and_a_new_notebook_and_keeps_the_rest(repo):
    first = workspace.sync(repo)
    new_drop = repo / "release" / "drop99-new" / "drop99-new.ipynb"
    new_drop.parent.mkdir()
    new_drop.write_text('{"cells": []}\n')
    (repo / "notebooks" / "extra.ipynb").write_text('{"cells": []}\n')
    second = workspace.sync(repo)
    assert sorted(second.added) == [Path("notebooks/extra.ipynb"), Path("release/drop99-new/drop99-new.ipynb")]
    assert sorted(second.kept) == sorted(first.added)
    assert (repo / "work/release/drop99-new/drop99-new.ipynb").read_text() == '{"cells": []}\n'


def test_sync_never_overwrites_the_students_file_even_when_the_release_changes(repo):
    workspace.sync(repo)
    mine = repo / "work" / "release" / DROP / f"{DROP}.ipynb"
    mine.write_text("my answers")
    (repo / "release" / DROP / f"{DROP}.ipynb").write_text("a newer release")
    (repo / "work" / START).write_text("my notes on the start page")
    workspace.sync(repo)
    assert mine.read_text() == "my answers"
    assert (repo / "work" / START).read_text() == "my notes on the start page"


def test_a_later_run_names_the_files_the_course_changed_and_reset_takes_them(repo, capsys, monkeypatch):
    workspace.sync(repo)
    released = repo / "release" / DROP / f"{DROP}.ipynb"
    mine = repo / "work" / "release" / DROP / f"{DROP}.ipynb"
    mine.write_text("my answers")
    released.write_text(released.read_text().replace("YOUR CODE HERE", "YOUR CODE HERE (fixed)"))
    report = workspace.sync(repo)
    assert report.updated == [Path(f"release/{DROP}/{DROP}.ipynb")] and report.added == []
    assert mine.read_text() == "my answers"
    monkeypatch.setattr(workspace, "ROOT", repo)      # what `make lab` prints, on the test's repository
    monkeypatch.setattr(workspace, "lab_command", lambda *a, **k: pytest.skip("reached the launch"))
    with pytest.raises(pytest.skip.Exception):
        workspace.main(["lab"])
    assert f"make reset DROP={DROP}" in capsys.readouterr().out
    workspace.reset(DROP, repo)
    assert workspace.sync(repo).updated == []
    assert mine.read_bytes() == released.read_bytes()


def test_working_in_the_copy_leaves_the_tracked_files_unchanged(repo):
    before = tracked_digests(repo)
    workspace.sync(repo)
    for path in (repo / "work").rglob("*.ipynb"):
        path.write_text("edited by the student")      # what JupyterLab's autosave would do
    workspace.reset(DROP, repo)
    workspace.sync(repo)
    assert tracked_digests(repo) == before


def test_reset_keeps_a_backup_and_restores_the_releases_copy(repo):
    workspace.sync(repo)
    folder = repo / "work" / "release" / DROP
    mine, scratch = folder / f"{DROP}.ipynb", folder / "my_scratch.py"
    mine.write_text("my answers, first try")
    scratch.write_text("x = 1\n")
    backups = workspace.reset(DROP, repo, stamp="20261123-150000")
    assert backups == [folder / f"{DROP}.ipynb.bak-20261123-150000"]
    assert backups[0].read_text() == "my answers, first try"
    assert mine.read_bytes() == (repo / "release" / DROP / f"{DROP}.ipynb").read_bytes()
    assert scratch.read_text() == "x = 1\n", "reset touches only the release's files"
    mine.write_text("my answers, second try")       # a second reset in the same second keeps both
    again = workspace.reset(DROP, repo, stamp="20261123-150000")
    assert again == [folder / f"{DROP}.ipynb.bak-20261123-150000-2"]
    assert again[0].read_text() == "my answers, second try" and backups[0].read_text() == "my answers, first try"


def test_reset_of_a_drop_not_yet_copied_just_copies_it(repo):
    backups = workspace.reset(DROP, repo)
    assert backups == []
    assert (repo / "work" / "release" / DROP / f"{DROP}.ipynb").exists()


def test_reset_of_an_unknown_drop_names_the_drops_there_are(repo):
    with pytest.raises(ValueError, match=r"no drop named 'drop5'.*drop05-data-parallel-trace.*make reset DROP="):
        workspace.reset("drop5", repo)


def test_reset_from_the_command_line_without_a_drop_says_how(capsys):
    with pytest.raises(SystemExit) as stop:
        workspace.main(["reset"])
    assert stop.value.code == 2
    assert "make reset DROP=" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        workspace.main(["reset", "drop5"])
    assert stop.value.code == 2
    assert "no drop named 'drop5'" in capsys.readouterr().err


def links_of_the_start_page() -> list[str]:
    """Every relative link the start page shows: those written in its Markdown
    cells and those of the course map its code cell renders (called with the
    link prefix the cell itself passes)."""
    cells = json.loads((ROOT / START).read_text())["cells"]
    links = []
    for cell in cells:
        text = "".join(cell["source"])
        if cell["cell_type"] == "markdown":
            links += re.findall(r"\]\(([^)#\s]+)\)", text)
        for prefix in re.findall(r"course_map_(?:markdown|with_progress)\(link_prefix=\"([^\"]*)\"\)", text):
            links += re.findall(r"\]\(([^)#\s]+)\)", course_map_markdown(link_prefix=prefix))
    return [link for link in links if "://" not in link]


def test_every_link_of_the_start_page_resolves_inside_the_work_copy(repo):
    workspace.sync(repo)
    links = links_of_the_start_page()
    assert any(link.startswith("../release/") for link in links), "the course map's links were not found"
    assert "practice.ipynb" in links
    start_folder = repo / "work" / "notebooks"
    for link in links:
        target = (start_folder / link).resolve()
        assert target.is_file(), f"the start page links to {link}, missing from work/"
        assert (repo / "work").resolve() in target.parents, f"{link} leaves work/ for a tracked file"


def test_student_mode_serves_work_opens_the_start_page_and_switches_nbgrader_instructor_off(repo):
    argv, env = workspace.lab_command("student", root=repo)
    assert argv[1:3] == ["-m", "jupyterlab"]
    assert f"--ServerApp.root_dir={repo / 'work'}" in argv
    assert f"--LabApp.default_url=/lab/tree/{START}" in argv
    for name in ("formgrader", "course_list", "assignment_list"):
        assert f"--ServerApp.jpserver_extensions=nbgrader.server_extensions.{name}=False" in argv
    assert not any("validate_assignment" in arg for arg in argv), "students keep Validate"
    config_dir = Path(env["JUPYTER_CONFIG_PATH"].split(":")[0])
    page = json.loads((config_dir / "labconfig" / "page_config.json").read_text())
    for plugin in ("formgrader", "create-assignment", "course-list", "menu"):
        assert page["disabledExtensions"][f"@jupyter/nbgrader:{plugin}"] is True
    assert "@jupyter/nbgrader:validate-assignment" not in page["disabledExtensions"]
    assert page["disabledExtensions"]["@jupyterlab/apputils-extension:announcements"] is True, "no news pop-up"
    assert repo / "work" in config_dir.parents, "the per-launch config lives in the ignored work/"


def test_instructor_mode_serves_the_repository_with_nbgrader_whole(repo, monkeypatch):
    monkeypatch.delenv("JUPYTER_CONFIG_PATH", raising=False)
    argv, env = workspace.lab_command("instructor", root=repo)
    assert f"--ServerApp.root_dir={repo}" in argv
    assert not any("jpserver_extensions" in arg for arg in argv)
    assert "JUPYTER_CONFIG_PATH" not in env
    assert not (repo / "work").exists()


def test_both_modes_hide_build_folders_from_the_file_browser(repo):
    for mode in ("student", "instructor"):
        argv, _ = workspace.lab_command(mode, root=repo)
        hidden = [arg.split("=", 1)[1] for arg in argv if arg.startswith("--ContentsManager.hide_globs=")]
        for folder in ("threeaxes.egg-info", "__pycache__", ".pytest_cache"):
            assert any(Path(folder).match(glob) for glob in hidden), (mode, folder)
        assert "*.ipynb" not in hidden


def test_an_unknown_mode_says_which_there_are(repo):
    with pytest.raises(ValueError, match="mode='student'.*'instructor'"):
        workspace.lab_command("teacher", root=repo)


def test_the_makefile_runs_the_workspace_module():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^lab:.*\n\t.*-m autograder\.apps\.workspace lab$", makefile, re.M)
    assert re.search(r"^lab-instructor:.*\n\t.*-m autograder\.apps\.workspace lab --instructor$", makefile, re.M)
    assert re.search(r"^reset:.*\n\t.*-m autograder\.apps\.workspace reset \$\(DROP\)$", makefile, re.M)
    assert "/work/" in (ROOT / ".gitignore").read_text().splitlines()


# --- a real JupyterLab server ------------------------------------------------

TOKEN = "three-axes-test-token"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(port: int, path: str) -> tuple[int, bytes]:
    sep = "&" if "?" in path else "?"
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}{sep}token={TOKEN}", timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, b""


class Server:
    """`jupyter lab --no-browser` exactly as `lab_command` builds it, on a free port."""

    def __init__(self, mode, repo, log):
        self.port = free_port()
        argv, env = workspace.lab_command(mode, root=repo, extra=[
            "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}",
        ])
        self.log = log
        self.process = subprocess.Popen(argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60   # a loaded 2-core machine took 15-17 s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited:\n{log.read_text()}")
            try:
                if get(self.port, "/api/status")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within 60 s:\n{log.read_text()}")

    def printed_url_path(self) -> str:
        urls = re.findall(r"http://127\.0\.0\.1:\d+(/\S*)\?token=", self.log.read_text())
        assert urls, self.log.read_text()
        return urls[0]

    def stop(self):
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def page_config(html: bytes) -> dict:
    match = re.search(rb'<script id="jupyter-config-data" type="application/json">(.*?)</script>', html, re.S)
    return json.loads(match.group(1))


@pytest.mark.slow
def test_a_real_student_server_opens_the_work_copys_start_page_without_the_formgrader(repo, tmp_path):
    workspace.sync(repo)
    start = repo / "work" / START
    nb = json.loads(start.read_text())
    nb["cells"].append({"cell_type": "markdown", "metadata": {}, "source": "my own note"})
    start.write_text(json.dumps(nb))             # the student's copy now differs from the tracked one
    for build in ("threeaxes.egg-info", "__pycache__", ".pytest_cache"):
        (repo / "work" / build).mkdir()
    server = Server("student", repo, tmp_path / "student.log")
    try:
        path = server.printed_url_path()
        assert path == f"/lab/tree/{START}", "the printed URL must open the start page, not the Launcher"
        status, html = get(server.port, path)
        config = page_config(html)
        assert status == 200 and config["treePath"] == START
        assert Path(config["serverRoot"]) == repo / "work"
        served_off = config["disabledExtensions"]        # the page JupyterLab's front end reads
        for plugin in [*workspace.NBGRADER_LAB_OFF, workspace.LAB_NEWS]:
            assert plugin in served_off, plugin
        assert "@jupyter/nbgrader:validate-assignment" not in served_off
        status, body = get(server.port, f"/api/contents/{START}")
        assert status == 200 and "my own note" in body.decode(), "the server must serve the student's copy"
        listing = [item["name"] for item in json.loads(get(server.port, "/api/contents/")[1])["content"]]
        assert sorted(listing) == ["notebooks", "release"], listing
        assert get(server.port, "/formgrader")[0] == 404
        assert get(server.port, "/formgrader/api/assignments")[0] == 404
    finally:
        server.stop()


@pytest.mark.slow
def test_a_real_instructor_server_serves_the_formgrader_on_the_repository(repo, tmp_path):
    (repo / "threeaxes.egg-info").mkdir()
    server = Server("instructor", repo, tmp_path / "instructor.log")
    try:
        assert server.printed_url_path() == f"/lab/tree/{START}"
        assert get(server.port, "/formgrader")[0] == 200
        listing = [item["name"] for item in json.loads(get(server.port, "/api/contents/")[1])["content"]]
        assert sorted(listing) == ["notebooks", "release"], listing
        served_off = page_config(get(server.port, f"/lab/tree/{START}")[1])["disabledExtensions"]
        assert "@jupyter/nbgrader:formgrader" not in served_off
    finally:
        server.stop()
