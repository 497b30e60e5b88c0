"""A student's session in a real browser: headless Chromium, driven by selenium,
in JupyterLab started as `make lab` starts it (student mode), but for the forkserver
its kernels would start on `import threeaxes`: nothing here launches ranks (drop 14
sizes a cluster on paper), so THREEAXES_PRESTART=0 (tests/core/test_launch_prestart.py
checks that head start in a real kernel).

The session, on a temporary copy of the course (never the tracked files, never
the developer's own work/):

1. the printed URL opens the start page, which renders; its course map cell runs;
2. the map's link opens drop 14, whose answer cells hold the solutions
   (a student who has written them): it opens on its title, unmodified (no unsaved
   change before the student types), its "Going deeper" sections folded; one unfolds
   on a click (screenshots of both in the test's folder); Run All runs the whole drop
   without an error, and the start page's map, run again, shows drop 14's core checks
   passing;
3. the reveal (folded: it comes after the answers) unfolds; its explorer's "show row"
   slider moves (arrow key on its handle) and both its plot and its text change;
4. a typical mistake from the drop's grading.json goes into its answer cell; that
   cell and its check run, and the check's message (the mistake's feedback
   phrase) shows on the page, alone: no traceback through the course's code;
5. the browser console holds no error from our stack (see `our_errors`), and no
   warning that an extension was built for another JupyterLab version.

Needs Chromium, chromedriver and selenium; skips without them (`make
test-browser` fails instead). `make test-browser` runs this file alone.
"""
from __future__ import annotations

import os
import shutil
import sys
import time
from pathlib import Path

import nbformat
import pytest
from lab_page import (
    CELL_TEXT,
    KERNEL_IDLE,
    OTHER_ORIGINS,
    PANEL,
    RUN_CELL,
    TOKEN,
    Lab,
    chromium,
    open_notebook,
    our_errors,
    require_browser,
    run_all,
    version_warnings,
    wait_for,
    wait_for_python,
)

from autograder.apps import workspace

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))     # grading_harness.py lives beside the other tests
from grading_harness import answer_ids, load_drop, set_answer, solution_of  # noqa: E402

DROP = "drop14-defend-70b-on-64"
MISTAKE = "tp_across_nodes"                  # a mistake of source/<DROP>/grading.json
REVEAL = "## Going deeper: the reveal"       # the folded section after the answers
SLIDER = "show row"                          # the ConfigExplorer slider the session moves
MAP_LINE = 'Markdown(course_map_with_progress(link_prefix="../release/"))'   # the start page's map cell


def student_copy(tmp: Path) -> Path:
    """A repository in `tmp` with the real notebooks/ and release/, synced into
    its work/ as `make lab` does; drop 14's answer cells hold the solutions."""
    repo = tmp / "repo"
    for folder in ("notebooks", "release"):
        shutil.copytree(ROOT / folder, repo / folder, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
    workspace.sync(repo)
    path = repo / "work" / "release" / DROP / f"{DROP}.ipynb"
    source = nbformat.read(ROOT / "source" / DROP / f"{DROP}.ipynb", as_version=4)
    nb = nbformat.read(path, as_version=4)
    for grade_id in answer_ids(source):
        nb = set_answer(nb, grade_id, solution_of(source, grade_id))
    nbformat.write(nb, path)
    return repo


# the explorer around a slider: its readout, its text (the summary line) and its plot (the PNG)
SLIDER_OF = """
const sliderOf = label => [...document.querySelectorAll('.jp-OutputArea-output .widget-slider')]
    .find(s => (s.querySelector('.widget-label') || {}).textContent === label);
"""

EXPLORER = SLIDER_OF + """
const slider = sliderOf(arguments[0]);
if (!slider) return null;
slider.scrollIntoView({block: 'center'});     // shown, so that innerText is what a student sees
const explorer = slider.closest('.jp-OutputArea-output');
const texts = [...explorer.querySelectorAll('.widget-html')].map(h => h.innerText);
const image = explorer.querySelector('.widget-output img');
const state = {readout: slider.querySelector('.widget-readout').innerText,
               text: texts.find(t => t.includes('Showing')), image: image && image.src};
const before = arguments[1];
if (!state.text || !state.image) return null;
if (before && (state.text === before.text || state.image === before.image)) return null;
return state;
"""

# the notebook as it opened: unsaved changes, its first cell's text, and its "Going deeper"
# headings: whether each is folded and whether the cell under it is hidden
OPENED = PANEL + """
const panel = panelOf(arguments[0]);
if (!panel || !panel.context.isReady || !panel.sessionContext.session) return null;
const kernel = panel.sessionContext.session.kernel;
if (!kernel || kernel.status !== 'idle') return null;
const widgets = panel.content.widgets;
const deeper = widgets.map((w, i) => [w, i]).filter(([w]) =>
    (w.model.getMetadata('tags') || []).includes('deeper')
    && w.model.type === 'markdown' && w.headingInfo && w.headingInfo.level > 0);
return {dirty: panel.context.model.dirty, first: widgets[0].model.sharedModel.getSource().split('\\n')[0],
        deeper: deeper.map(([w, i]) => ({index: i, folded: w.headingCollapsed,
                                         next_hidden: i + 1 < widgets.length && widgets[i + 1].isHidden}))};
"""

# unfold the heading cell at arguments[1] as a click on its fold button does
UNFOLD = PANEL + """
const cell = panelOf(arguments[0]).content.widgets[arguments[1]];
cell.node.scrollIntoView({block: 'center'});
const button = cell.node.querySelector('.jp-collapseHeadingButton');
if (!button) return 'no fold button';
button.click();
return null;
"""

HEADING_INDEX = PANEL + """
const widgets = panelOf(arguments[0]).content.widgets;
const i = widgets.findIndex(w => w.model.type === 'markdown'
                            && w.model.sharedModel.getSource().startsWith(arguments[1]));
return i < 0 ? null : i;
"""

NEXT_SHOWN = PANEL + "return !panelOf(arguments[0]).content.widgets[arguments[1] + 1].isHidden;"

ACTIVATE = PANEL + "app.shell.activateById(panelOf(arguments[0]).id);"

MAP_LINK = "return document.querySelector(`.jp-RenderedMarkdown a[href*='${arguments[0]}']`);"

SLIDER_HANDLE = SLIDER_OF + "return sliderOf(arguments[0]).querySelector('.noUi-handle');"


# --- the session -------------------------------------------------------------

@pytest.mark.slow
def test_a_student_session_in_chromium_through_drop14(tmp_path):
    require_browser()
    from selenium.webdriver.common.keys import Keys

    drop = load_drop(ROOT / "source" / DROP)
    mistake = next(m for m in drop.mistakes if m.name == MISTAKE)
    check = mistake.loses[0]                    # the visible check that must catch it
    start_page = workspace.START_PAGE
    drop_page = f"release/{DROP}/{DROP}.ipynb"

    times, t0 = {}, time.perf_counter()

    def lap(name):
        times[name] = time.perf_counter() - t0 - sum(times.values())

    lab = Lab(student_copy(tmp_path), tmp_path, prestart=False)     # no launch: see the module's docstring
    driver, console = None, []
    try:
        driver = chromium(tmp_path)
        lap("server and browser start")

        # 1. the start page: the URL `make lab` prints
        driver.get(f"{lab.base}/lab/tree/{start_page}?token={TOKEN}")
        open_notebook(driver, start_page)
        wait_for(driver, "return [...document.querySelectorAll('.jp-RenderedMarkdown h1')]"
                         ".some(h => h.textContent.includes('Three Axes: start here'))",
                 what="the start page's title to render")
        # a cell run before its kernel has started is not run: JupyterLab asks for a kernel instead
        wait_for(driver, KERNEL_IDLE, start_page, what="the start page's kernel to start")
        ran = driver.execute_async_script(RUN_CELL, start_page, MAP_LINE, None)
        assert "error" not in ran, ran
        lap("start page opened, its course map drawn")

        # 2. its course map links to the drop; the drop runs top to bottom
        link = wait_for(driver, MAP_LINK, f"{DROP}.ipynb", what=f"the course map's link to {DROP}")
        link.click()
        open_notebook(driver, drop_page)
        opened = wait_for(driver, OPENED, drop_page, what=f"{DROP} to open and its kernel to start")
        assert opened["first"].startswith("# Drop 14:"), f"the drop should open on its title: {opened['first']!r}"
        assert not opened["dirty"], "the drop shows unsaved changes before the student has typed anything"
        assert opened["deeper"], "the drop has no 'Going deeper' section"
        assert all(d["folded"] and d["next_hidden"] for d in opened["deeper"]), (
            f"every 'Going deeper' section should open folded: {opened['deeper']}")
        driver.save_screenshot(str(tmp_path / "drop14-folded.png"))
        first = opened["deeper"][0]["index"]
        assert driver.execute_script(UNFOLD, drop_page, first) is None, "the heading has no fold button"
        wait_for(driver, NEXT_SHOWN, drop_page, first, what="the section's cells to show after the click")
        driver.save_screenshot(str(tmp_path / "drop14-unfolded.png"))
        lap("drop opened from the map: title first, unmodified, depth folded, unfolded on a click")
        run_all(driver, drop_page)
        lap("drop run")

        # its core is answered (the defence's checks see only its form, so it is graded later,
        # not passed): the start page's map says so when its cell runs again
        driver.execute_script(ACTIVATE, start_page)         # back to the start page's tab
        open_notebook(driver, start_page)
        ran = driver.execute_async_script(RUN_CELL, start_page, MAP_LINE, None)
        assert "error" not in ran, ran
        wait_for(driver, KERNEL_IDLE, start_page, what="the start page's kernel to redraw the map")
        wait_for_python(lambda: "core answered" in driver.execute_script(CELL_TEXT, start_page, ran["index"]),
                        what="the start page's map to show drop 14's core answered", timeout=30)
        lap("progress shown on the start page")
        driver.execute_script(ACTIVATE, drop_page)           # and back to the drop
        open_notebook(driver, drop_page)

        # 3. the reveal comes after the answers, folded: unfold it, then the slider, keyboard on
        #    its handle; the plot and the text follow
        reveal = driver.execute_script(HEADING_INDEX, drop_page, REVEAL)
        assert reveal is not None, f"{DROP} has no '{REVEAL}' heading"
        assert driver.execute_script(UNFOLD, drop_page, reveal) is None, "the reveal has no fold button"
        wait_for(driver, NEXT_SHOWN, drop_page, reveal, what="the reveal's cells to show after the click")
        before = wait_for(driver, EXPLORER, SLIDER, None,
                          what=f"the explorer with the '{SLIDER}' slider to draw")
        handle = driver.execute_script(SLIDER_HANDLE, SLIDER)
        driver.execute_script("arguments[0].scrollIntoView({block: 'center'});", handle)
        handle.click()
        handle.send_keys(Keys.ARROW_RIGHT)
        after = wait_for(driver, EXPLORER, SLIDER, before,
                         what=f"the explorer's text and plot to change after moving '{SLIDER}'")
        assert int(after["readout"]) == int(before["readout"]) + 1, (before["readout"], after["readout"])
        lap("slider moved, plot and text redrawn")

        # 4. a wrong answer, its cell and its visible check run from the page
        ran = driver.execute_async_script(RUN_CELL, drop_page, mistake.answer, mistake.code)
        assert "error" not in ran, ran
        shown = driver.execute_async_script(RUN_CELL, drop_page, check, None)
        assert "error" not in shown, shown
        wait_for(driver, KERNEL_IDLE, drop_page, what="the kernel to finish the check")
        seen = []

        def check_message_shown():
            seen[:] = [driver.execute_script(CELL_TEXT, drop_page, shown["index"])]
            return mistake.feedback in seen[0]

        try:
            wait_for_python(check_message_shown, what="the check's message", timeout=30)
        except AssertionError:
            raise AssertionError(f"the check {check} should show {mistake.feedback!r} for the mistake "
                                 f"{MISTAKE}; the page shows:\n{seen[0]}") from None
        assert "Traceback" not in seen[0] and "File " not in seen[0], (
            f"the check's message should show alone, without a traceback:\n{seen[0]}")
        driver.save_screenshot(str(tmp_path / "drop14-failed-check.png"))
        lap("wrong answer caught by the visible check")

        # 5. the console, and where the page's requests went
        others = driver.execute_script(OTHER_ORIGINS)
        assert not others, f"the page fetched from outside the lab's server: {others}"
        console = driver.get_log("browser")
        errors = our_errors(console)
        assert not errors, "the browser console has errors:\n" + "\n".join(e["message"] for e in errors)
        mismatched = version_warnings(console)
        assert not mismatched, ("an extension asks for another JupyterLab than requirements.txt pins:\n"
                                + "\n".join(e["message"] for e in mismatched))
    finally:
        if driver is not None:
            console = console or driver.get_log("browser")
            driver.quit()
        lab.stop()
        keep = os.environ.get("THREEAXES_SCREENSHOTS")   # a folder to keep the screenshots in
        if keep:
            Path(keep).mkdir(parents=True, exist_ok=True)
            for shot in tmp_path.glob("*.png"):
                shutil.copy2(shot, Path(keep) / shot.name)
        total = time.perf_counter() - t0
        print(f"\nbrowser session {total:.1f} s: " + ", ".join(f"{k} {v:.1f} s" for k, v in times.items()))
        quiet = [e for e in console if e["level"] in ("DEBUG", "INFO")]
        print(f"browser console: {len(console)} entries, {len(quiet)} of them DEBUG or INFO")
        for entry in console:
            if entry not in quiet:
                print(f"console {entry['level']}: {entry['message'][:300]}")
