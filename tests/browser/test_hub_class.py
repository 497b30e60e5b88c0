"""A class on the course's JupyterHub, in headless Chromium: the hub `make hub` starts
(autograder/apps/hub/, hub/jupyterhub_config.py), on loopback, with real Unix accounts.

1. the instructor releases drop 1 to the exchange (python -m autograder.apps.exchange release);
2. ada logs in with her password, opens nbgrader's Assignments tab, sees the drop, fetches
   it, opens it from the tab, writes the solutions and runs it top to bottom (its ranks
   launch inside her server), saves, and submits from the tab;
3. bo does the same with a typical mistake (grading.json's forgets_master_copy) in one
   answer; cy, on the roster, hands in nothing;
4. the instructor collects, grades with the course's grading and releases feedback
   (python -m autograder.apps.exchange collect, grade, feedback), logs in, sees both scores
   in the formgrader, and reads the class's report (bo's mistake as the sentence he
   read, the written answers waiting, what to do next);
5. ada and bo fetch their feedback from the tab and read their own score, bo the
   sentence that names his mistake; neither reaches the other's server, submission or
   feedback, through the hub or as their own account in a shell;
6. what goes wrong: a student without a home folder, and an exchange others cannot write
   to, are refused with the fix in the message.

Where the clone lives in a folder other accounts cannot open (mktemp -d, a home of mode
700), the course's environment is first staged where they can read it, as an instructor
in that place is told to (`python -m autograder.apps.hub stage`).

Root only (it adds the accounts, and removes them and their homes after); it skips,
saying why, without root, Chromium, or where jupyterhub and its proxy cannot be
installed (autograder.apps.hub installs them once into a cache). A screenshot of every step
lands in the test's own folder (pytest's tmp_path, printed; THREEAXES_HUB_SCREENSHOTS=<dir>
copies them there too), the last one named after the step that failed.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import nbformat
import pytest
from hub_class_steps import ADA, BO, CY, DEE, INSTRUCTOR, PREFIX, Instructor, as_account, remove_accounts, spawn_refused
from hub_page import COURSE, LISTS, OPEN_FROM_TAB, SET_SOURCE, Shots, click, log_in, open_assignments_tab, row, save
from lab_page import (
    CELL_TEXT,
    KERNEL_IDLE,
    NO_LSP_SEARCH,
    RUN_CELL,
    chromium,
    open_notebook,
    require_browser,
    run_all,
    wait_for,
    wait_for_python,
)

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from grading_harness import Course, answer_ids, load_drop, solution_of  # noqa: E402

from autograder.apps import hub  # noqa: E402

DROP = "drop01-three-kinds-of-parallel"
MISTAKE = "forgets_master_copy"


def _why_not() -> str | None:
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return "the hub test adds Unix accounts and runs the hub with PAM: it needs root on Linux"
    if not shutil.which("useradd") or not shutil.which("chpasswd"):
        return "no useradd/chpasswd here"
    if shutil.which("node") is None or shutil.which("npm") is None:
        return "no Node.js/npm for configurable-http-proxy (apt-get install nodejs npm)"
    return None


pytestmark = [pytest.mark.slow, pytest.mark.skipif(_why_not() is not None, reason=_why_not() or ""),
              # nbgrader's own release_feedback (a typo of its own in 0.9.6), as in test_exchange_accounts.py
              pytest.mark.filterwarnings("ignore:Passing unrecognized arguments to super\\(ExchangeReleaseFeedback")]


def load_exercises() -> list[dict]:
    from autograder import spec

    return [e.entry for e in spec.load(ROOT / "source" / DROP / "grading.json").exercises]


def test_a_class_on_the_hub_in_chromium(released, tmp_path):
    require_browser()
    try:
        done = hub.install(accounts=True, log=lambda line: print(line, flush=True))
    except hub.HubError as why:
        pytest.skip(f"jupyterhub and configurable-http-proxy could not be installed: {why}")
    base = Path(tempfile.mkdtemp(prefix="threeaxes-hub-test-"))
    base.chmod(0o755)
    shots_dir = tmp_path / "screenshots"            # the test's own folder: pytest keeps the last runs'
    print(f"\nscreenshots of each step: {shots_dir}", flush=True)
    times, t0 = {}, time.perf_counter()

    def lap(name):
        times[name] = time.perf_counter() - t0 - sum(times.values())

    drop = load_drop(ROOT / "source" / DROP)
    mistake = next(m for m in drop.mistakes if m.name == MISTAKE)
    remove_accounts()          # left over from a run that was killed
    passwords = {name: f"pw-{name}-{os.urandom(4).hex()}" for name in (INSTRUCTOR, ADA, BO, CY, DEE)}
    class_hub, driver, shots, step = None, None, None, "setting up"
    try:
        for name, password in passwords.items():
            hub.make_account(name, password)
        shutil.rmtree(hub.pwd_entry(DEE).pw_dir)               # section 5: a student whose home is gone
        # the model solution's cell times that the run's other courses measured (the graded class's
        # drop 1): grading here runs in this process, as root, like theirs
        course = Course(base / "instructor", [DROP], released=released, share_limits=True).root
        instructor = Instructor(course, base / "state", base / "instructor")
        entry = hub.pwd_entry(INSTRUCTOR)
        subprocess.run(["chown", "-R", f"{entry.pw_uid}:{entry.pw_gid}", str(course)], check=True)
        # a clone in a private folder (a home of mode 700, mktemp -d): the students' accounts cannot
        # read its .venv, so the course's environment is staged where they can, as the README tells
        # an instructor to (python -m autograder.apps.hub stage DIR, then start --env DIR)
        staged = None
        if not hub.open_to_all(hub.course_site()):
            step = "staging the course's environment outside the private clone"
            staged = base / "course-env"
            hub.stage(staged, log=lambda line: print(line, flush=True))
            lap("course environment staged")
        cfg = hub.Settings(state=base / "state", students=[ADA, BO, CY, DEE], instructor=INSTRUCTOR,
                           course=course, accounts=True, port=hub.free_port(),
                           server_args=("--LabApp.expose_app_in_browser=True", *NO_LSP_SEARCH), env=staged)
        settings = hub.prepare(cfg, done)
        class_hub = hub.Hub(settings, done)
        lap("accounts made, hub started")

        step = "what goes wrong: no home, an exchange closed to others"
        said = spawn_refused(class_hub, DEE)
        assert "home folder" in said and f"chown {DEE}" in said, said
        exchange = Path(settings["exchange"])
        exchange.chmod(0o755)
        said = spawn_refused(class_hub, CY)
        exchange.chmod(0o777)
        assert "chmod ugo+rwx" in said and str(exchange) in said, said

        step = "spawning every server through the REST API"
        spawned = {}            # the three servers start while the drop is released and the browser starts
        threads = [threading.Thread(target=lambda n=n: spawned.update({n: class_hub.spawn(n)}))
                   for n in (ADA, BO, INSTRUCTOR)]
        for thread in threads:
            thread.start()
        step = "releasing the drop"
        instructor("roster", ADA, BO, CY)             # nbgrader db student import roster.csv
        instructor("release", DROP)
        driver = chromium(base)
        shots = Shots(driver, shots_dir)
        lap("drop released, browser started")

        notebook = f"{DROP}/{DROP}.ipynb"
        source = nbformat.read(course / "source" / DROP / f"{DROP}.ipynb", as_version=4)
        for name in (ADA, BO):                             # cy never comes: she hands in nothing
            step = f"{name}: log in, the Assignments tab"
            log_in(driver, class_hub.url, name, passwords[name])
            shots(f"{name} logged in")
            open_assignments_tab(driver)
            listed = row(driver, "released", DROP)
            shots(f"{name} assignments tab")
            assert listed["buttons"] == ["Fetch"], listed
            step = f"{name}: fetch, open from the tab"
            click(driver, "released", DROP, "Fetch")
            row(driver, "fetched", DROP)
            wait_for(driver, OPEN_FROM_TAB, DROP, DROP, what="the notebook's link in the fetched row")
            open_notebook(driver, notebook)
            shots(f"{name} opened the drop")
            if name == ADA:
                step = "ada: the solutions, Run All (ranks launch in her server)"
                for grade_id in answer_ids(source):
                    assert driver.execute_script(SET_SOURCE, notebook, grade_id, solution_of(source, grade_id)) is None
                written = next(c.metadata["nbgrader"]["grade_id"] for c in source.cells if c.cell_type == "markdown"
                               and c.metadata.get("nbgrader", {}).get("solution"))
                said = "Data parallelism splits the batch."
                assert driver.execute_script(SET_SOURCE, notebook, written, said) is None
                run_all(driver, notebook)
            else:
                step = "bo: a typical mistake, its check names it"
                wait_for(driver, KERNEL_IDLE, notebook, what="bo's kernel to start")
                shown = driver.execute_async_script(RUN_CELL, notebook, mistake.answer, mistake.code)
                assert "error" not in shown, shown
                wait_for(driver, KERNEL_IDLE, notebook, what="bo's kernel to run his answer")
                checked = driver.execute_async_script(RUN_CELL, notebook, mistake.loses[0], None)
                wait_for(driver, KERNEL_IDLE, notebook, what="bo's kernel to run the check")
                seen = []
                wait_for_python(lambda: mistake.feedback in (seen.append(driver.execute_script(
                    CELL_TEXT, notebook, checked["index"])) or seen[-1]), what="the check's message", timeout=60)
            save(driver, notebook)
            shots(f"{name} answered and saved")
            step = f"{name}: submit from the tab"
            open_assignments_tab(driver)
            click(driver, "fetched", DROP, "Submit")
            row(driver, "submitted", DROP)
            shots(f"{name} submitted")
            lap(f"{name} fetched, worked and submitted")

        step = "the instructor: collect, grade, feedback"
        collected = instructor("collect", DROP)
        assert ADA in collected and BO in collected and CY not in collected, collected
        graded = instructor("grade", DROP)
        scores = {line.split()[0]: line.split(": ", 1)[1].split(" / ")
                  for line in graded.splitlines() if line.startswith(PREFIX)}
        assert float(scores[ADA][0]) == sum(drop.points.values()) > float(scores[BO][0]), graded
        instructor("feedback", DROP)
        lap("collected, graded, feedback released")

        step = "the instructor sees the scores in the formgrader"
        for thread in threads:
            thread.join()
        assert set(spawned) == {ADA, BO, INSTRUCTOR}, spawned
        log_in(driver, class_hub.url, INSTRUCTOR, passwords[INSTRUCTOR])
        driver.get(f"{class_hub.url}/user/{INSTRUCTOR}/formgrader/manage_submissions/{DROP}")
        table = wait_for(driver, "const t = document.body.innerText; return t.includes(arguments[0]) "
                         "&& t.includes(arguments[1]) ? t : null;", ADA, BO,
                         what="the formgrader's submissions of the drop")
        shots("formgrader submissions")
        for name in (ADA, BO):
            line = next(ln for ln in table.splitlines() if name in ln)
            assert f"{float(scores[name][0]):g}" in line.replace(".0 ", " ").replace(".00", ""), (name, line)
        step = "the instructor reads the class's report"
        driver.get(f"{class_hub.url}/user/{INSTRUCTOR}/files/report/index.html")
        page = wait_for(driver, "return document.body && document.body.innerText.includes('Next') "
                        "&& document.body.innerText;", what="the class's report")
        shots("class report")
        bo_says = next(m["says"] for ex in load_exercises() for m in ex["mistakes"] if m["name"] == MISTAKE)
        assert bo_says in page and MISTAKE in page, page[:3000]          # the sentence, its name small
        # ada's written answer
        assert "Manual Grading" in page and "autograder.apps.exchange feedback" in page, page[:3000]
        lap("formgrader shows the scores, the report says what is next")

        for name in (ADA, BO):
            step = f"{name}: fetch feedback from the tab, read it"
            log_in(driver, class_hub.url, name, passwords[name])
            open_assignments_tab(driver)
            click(driver, "submitted", DROP, "Fetch Feedback")
            wait_for(driver, "const t = document.getElementById(arguments[0]); "
                     "return t && t.innerText.includes('view feedback');", LISTS["submitted"],
                     what=f"{name}'s '(view feedback)' link")
            shots(f"{name} fetched feedback")
            listing = class_hub.request("GET", f"/user/{name}/assignments?course_id={COURSE}")
            path = next(sub["local_feedback_path"] for a in listing["value"] if a["status"] == "submitted"
                        for sub in a.get("submissions", [a]) if sub.get("local_feedback_path"))
            home = hub.pwd_entry(name).pw_dir
            path = os.path.relpath(path, home) if os.path.isabs(path) else path
            path = f"{path}/{DROP}.html"                       # feedback/<timestamp>/<notebook>.html
            driver.get(f"{class_hub.url}/user/{name}/files/{path}")
            page = wait_for(driver, "return document.body && document.body.innerText;", what="the feedback page")
            shots(f"{name} reads feedback")
            assert f"{float(scores[name][0]):g}" in page or scores[name][0] in page, page[:2000]
            assert (mistake.feedback in page) == (name == BO), (name, mistake.feedback)
            other = BO if name == ADA else ADA
            assert other not in page
            step = f"{name}: the other's server and feedback are out of reach"
            driver.get(f"{class_hub.url}/user/{other}/files/{path.replace(name, other)}")
            time.sleep(1)
            assert "Score" not in driver.execute_script("return document.body.innerText;")
            shots(f"{name} tries {other}'s feedback")
        lap("feedback fetched and read")

        step = "as their own accounts (a terminal): no one lists another's work"
        inbound = exchange / COURSE / "inbound"
        feedback_folder = exchange / COURSE / "feedback"
        assert len(os.listdir(inbound)) == 2
        for name, other in ((ADA, BO), (BO, ADA), (CY, ADA)):
            for folder in (inbound, feedback_folder, Path(hub.pwd_entry(other).pw_dir)):
                done_ls = as_account(name, "ls", str(folder))
                assert done_ls.returncode != 0, (name, folder, done_ls.stdout)
        assert not list(Path(hub.pwd_entry(CY).pw_dir).glob(f"{DROP}*"))
        browser_console = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        print("browser console errors (not failing the test):", len(browser_console))
        for entry in browser_console[:10]:
            print("  ", entry["message"][:300])
        lap("isolation checked")
    except BaseException:
        if shots is not None:
            shots(f"FAILED at {step}")
        print(f"\nfailed at: {step}; screenshots in {shots_dir}; the hub's log: {base / 'state' / 'jupyterhub.log'}")
        if (base / "state" / "jupyterhub.log").exists():
            print((base / "state" / "jupyterhub.log").read_text()[-6000:])
        raise
    finally:
        if driver is not None:
            driver.quit()
        if class_hub is not None:
            class_hub.stop()
        remove_accounts()
        total = time.perf_counter() - t0
        print(f"\nhub class session {total:.1f} s: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
        if os.environ.get("THREEAXES_HUB_SCREENSHOTS") and shots_dir.exists():   # a folder to copy them to
            shutil.copytree(shots_dir, os.environ["THREEAXES_HUB_SCREENSHOTS"], dirs_exist_ok=True)
        shutil.rmtree(base, ignore_errors=True)
