"""The pages people open, in headless Chromium: a submission's markup runs nothing there.

A notebook carries one of each attack on those pages (an image whose width is
`1 onerror=...`, HTML with handlers, frames and `javascript:` links, a markdown output
and a written answer with `javascript:` links, JavaScript, an execution count that is
markup). Each attack, if it ran, sets `document.title` to a name starting "pwned".
The notebook goes through `SanitizeStudentMarkup` (autograder/plugins/feedback.py, in the
autograde chain, so the formgrader's view of the autograded notebook holds what it
leaves, and in the feedback chain), is rendered as the feedback page's template
(classic, which the course's extends) and as the formgrader's (`formgrade`), and
opened; every link is clicked. The same notebook unsanitised is opened as a control:
its title must change, or the attacks prove nothing in this browser. `make report`'s
page is opened with every name and message in it hostile.

MathJax is not loaded here (the page fetches it from a CDN): its `\\href` is covered by
tests/autograder/test_feedback_sanitize.py, which checks what reaches the page.

Needs Chromium, chromedriver and selenium; skips without them.
"""
from __future__ import annotations

import copy
import sys
import time
from pathlib import Path

import nbformat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from lab_page import chromium, require_browser

PWNED = "pwned"


def _js(n: int) -> str:
    return f"void(document.title='{PWNED}-{n}')"     # void: a javascript: link's value would replace the page


def attack_notebook():
    nb = nbformat.v4.new_notebook()
    code = nbformat.v4.new_code_cell("shown()")
    code.outputs = [
        nbformat.v4.new_output("display_data", data={"image/png": "AAAA", "text/plain": "<Figure>"},
                               metadata={"image/png": {"width": f'1 onerror="{_js(1)}"'}}),
        nbformat.v4.new_output("display_data", data={"image/jpeg": "AAAA", "text/plain": "<Figure>"},
                               metadata={"width": f"1 onerror={_js(2).replace(' ', '')}"}),
        nbformat.v4.new_output("display_data", data={"text/plain": "html", "text/html": (
            f'<img src="x" onerror="{_js(3)}"><svg onload="{_js(4)}"></svg>'
            f'<details open ontoggle="{_js(5)}"><summary>s</summary></details>'
            f'<a href="javascript:{_js(6)}">html link</a><iframe src="data:text/html,<script>parent.{_js(7)}</script>">'
            f'</iframe><a href="java&#x09;script:{_js(8)}">tabbed link</a>')}),
        nbformat.v4.new_output("display_data", data={"text/plain": "md", "text/markdown":
                                                     f"[markdown output link](javascript:{_js(9)})"}),
        nbformat.v4.new_output("display_data", data={"text/plain": "js", "application/javascript": _js(10)}),
    ]
    code.execution_count = 1
    answer = nbformat.v4.new_markdown_cell(
        f"My answer: [written link](javascript:{_js(11)}) and <javascript:{_js(12)}> and [ref][r]\n\n"
        f"[r]: javascript:{_js(13)}\n\n<img src=x onerror=\"{_js(14)}\">")
    answer.metadata["nbgrader"] = {"grade": True, "solution": True, "locked": False, "grade_id": "why",
                                   "points": 1, "schema_version": 3}
    nb.cells = [code, answer]
    return nb


def _sanitized(nb, course: Path):
    from autograder.plugins.feedback import SanitizeStudentMarkup

    (course / "source").mkdir(parents=True, exist_ok=True)
    nb = copy.deepcopy(nb)
    nb, _ = SanitizeStudentMarkup().preprocess(nb, {"nbgrader": {"assignment": "dropXX", "notebook": "dropXX"},
                                                     "metadata": {"path": str(course)}})
    nb.cells[0].execution_count = 1
    return nb


def _pages(nb, folder: Path, name: str) -> list[Path]:
    """`nb` as the feedback page's template and the formgrader's render it."""
    from nbconvert import HTMLExporter
    from nbgrader.server_extensions.formgrader import handlers

    folder.mkdir(parents=True, exist_ok=True)
    pages = []
    feedback, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    formgrade, _ = HTMLExporter(template_name="formgrade", extra_template_basedirs=[handlers.template_path]) \
        .from_notebook_node(nb, resources={
            "assignment_id": "dropXX", "notebook_id": "dropXX", "submission_id": "s", "index": 0, "total": 1,
            "base_url": "/", "student": "student", "last_name": "L", "first_name": "F",
            "notebook_path": "/autograded/student/dropXX/dropXX.ipynb"})
    for kind, page in (("feedback", feedback), ("formgrade", formgrade)):
        path = folder / f"{name}-{kind}.html"
        path.write_text(page)
        pages.append(path)
    return pages


def _report_page(folder: Path) -> Path:
    from autograder.apps import report

    hostile = f"<img src=x onerror=\"{_js(20)}\">"
    table = {f"drop01{hostile}": {f"ex{hostile}": {
        "share": 0.5, "mistakes": {f"m{hostile}": [f"student{hostile}"]}, "says": {f"m{hostile}": [hostile]}}}}
    path = folder / "report.html"
    link = f"x' onmouseover='{_js(21)}' data-x='"   # a drop name that would end the link's quotes
    path.write_text(report._page(table, {f"drop01{hostile}": [f"s'{hostile}"], link: ["s"]}))
    return path


# every handler or script URL the page holds that carries an attack, as the browser parsed it
_LIVE = """return [...document.querySelectorAll('*')].flatMap(e => [...e.attributes]
    .filter(a => a.value.includes('pwned') && (a.name.startsWith('on')
                 || /^\\s*(javascript|data):/i.test(a.value.replace(/[\\x00-\\x20]/g, ''))))
    .map(a => e.tagName + ' ' + a.name + '=' + a.value));"""


def _title_after_opening(driver, page: Path) -> str:
    """The page's title once it has loaded, waited a moment, and had every link clicked."""
    driver.get(page.as_uri())
    time.sleep(1.0)
    for link in driver.find_elements("css selector", "a[href]"):
        try:
            driver.execute_script("arguments[0].click();", link)
        except Exception:  # noqa: BLE001 - a link that leaves the page ends the clicking
            break
        if not driver.current_url.startswith(page.as_uri()):
            driver.get(page.as_uri())
    time.sleep(0.5)
    return driver.title


def test_the_pages_people_open_run_none_of_a_submissions_script(tmp_path):
    require_browser()
    nb = attack_notebook()
    attacked = _pages(nb, tmp_path / "pages", "unsanitised")
    clean = _pages(_sanitized(nb, tmp_path / "course"), tmp_path / "pages", "sanitised")
    driver = chromium(tmp_path)
    try:
        for page in attacked:
            assert _title_after_opening(driver, page).startswith(PWNED), (
                f"the control {page.name} ran none of the attacks: they prove nothing in this browser")
            driver.get(page.as_uri())
            assert driver.execute_script(_LIVE), f"the control {page.name}: the handler check finds nothing"
        for page in clean + [_report_page(tmp_path / "pages")]:
            title = _title_after_opening(driver, page)
            assert PWNED not in title, f"{page.name}: a submission's script ran (title {title!r})"
            driver.get(page.as_uri())
            assert driver.execute_script(_LIVE) == [], f"{page.name} holds a live handler or script link"
    finally:
        driver.quit()
