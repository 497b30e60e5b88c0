"""JupyterLab and headless Chromium for tests/browser: what the browser test
needs installed (and what it says when something is missing), JupyterLab as
`make lab` starts it, a Chromium that keeps its console log, and the scripts
that drive a notebook through JupyterLab's own application object
(`window.jupyterapp`, exposed by `--LabApp.expose_app_in_browser`)."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import urllib.request
import warnings
from pathlib import Path

import pytest

from autograder.apps import workspace

TOKEN = "three-axes-browser-test"
WAIT_S = 120                                 # the longest a step may take on a loaded 2-core machine
INSTALL = "apt-get install chromium chromium-driver (as root), then pip install selenium (or `make`)"


def chromium_binary() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def what_is_missing() -> list[str]:
    """What the browser test lacks, each with the command that installs it."""
    missing = []
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("selenium (pip install selenium; it is in requirements.txt, so `make` installs it)")
    if chromium_binary() is None:
        missing.append("Chromium (apt-get install chromium)")
    if shutil.which("chromedriver") is None:
        missing.append("chromedriver (apt-get install chromium-driver)")
    return missing


def require_browser() -> None:
    """Skip when the browser is missing, saying why in the warnings summary (a
    plain UserWarning: pytest-xdist must rebuild the category in its controller,
    which cannot import this folder); fail instead under `make test-browser`
    (THREEAXES_BROWSER_TEST=required)."""
    missing = what_is_missing()
    if not missing:
        return
    reason = f"the browser test needs {'; '.join(missing)}. All of it: {INSTALL}"
    if os.environ.get("THREEAXES_BROWSER_TEST") == "required":
        pytest.fail(reason, pytrace=False)
    warnings.warn(f"browser test skipped: {reason}", UserWarning, stacklevel=2)
    pytest.skip(reason)


# jupyter-lsp looks for language servers when the server starts (`npm prefix -g` among them, a
# second of CPU); the course installs none and no test reads them
NO_LSP_SEARCH = ("--LanguageServerManager.autodetect=False",)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Lab:
    """`jupyter lab --no-browser` from `workspace.lab_command("student")` on a free
    port, plus what a test needs: `expose_app_in_browser` (window.jupyterapp) and
    a known token. Settings and workspaces go to `tmp`, so neither the developer's
    JupyterLab settings change the session nor the session theirs. `prestart=False`: its kernels
    start no forkserver on `import threeaxes` (THREEAXES_PRESTART=0), for a session that launches
    no ranks, where that server would preload torch for nothing."""

    def __init__(self, repo: Path, tmp: Path, *, prestart: bool = True):
        self.port = free_port()
        argv, env = workspace.lab_command("student", root=repo, extra=[
            "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0", f"--IdentityProvider.token={TOKEN}",
            "--LabApp.expose_app_in_browser=True", *NO_LSP_SEARCH,
        ])
        env.update(JUPYTERLAB_SETTINGS_DIR=str(tmp / "settings"), JUPYTER_RUNTIME_DIR=str(tmp / "runtime"),
                   JUPYTERLAB_WORKSPACES_DIR=str(tmp / "workspaces"))
        if not prestart:
            env["THREEAXES_PRESTART"] = "0"
        self.log = tmp / "jupyterlab.log"
        self.process = subprocess.Popen(argv, env=env, stdout=self.log.open("w"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"jupyter lab exited:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.base}/api/status?token={TOKEN}", timeout=5):
                    return
            except OSError:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"jupyter lab did not answer within {WAIT_S} s:\n{self.log.read_text()}")

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.process.terminate()          # the server shuts its kernels down on SIGTERM
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def chromium(tmp: Path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium_binary()
    for arg in ("--headless=new", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1400,1000",
                f"--user-data-dir={tmp / 'chromium-profile'}"):
        options.add_argument(arg)
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        options.add_argument("--no-sandbox")        # Chromium refuses to run as root with its sandbox
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})   # what get_log("browser") returns
    # both paths given, so selenium never looks for (or downloads) a driver itself
    driver = webdriver.Chrome(options=options, service=Service(executable_path=shutil.which("chromedriver")))
    driver.set_script_timeout(WAIT_S + 30)     # past any wait_for's own timeout, which says what it waited for
    return driver


# --- the page, through JupyterLab's own application object ----------------------

def wait_for_python(poll, *, what: str, timeout: float = WAIT_S):
    """Call `poll` until it returns something truthy; returns that."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = poll()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


# The condition of wait_for, polled inside the page every 200 ms: one WebDriver call a wait, not one a poll
# (each costs the test, chromedriver and the page a few ms of CPU). Its last two arguments are the
# timeout in ms and selenium's callback; a condition that throws ends the wait with its error, as
# execute_script raises it. Empty arrays and objects count as false, as in Python.
POLL_IN_PAGE = """
const done = arguments[arguments.length - 1], timeoutMs = arguments[arguments.length - 2];
const args = Array.prototype.slice.call(arguments, 0, -2), deadline = Date.now() + timeoutMs;
const truthy = v => Array.isArray(v) ? v.length > 0
    : (v && Object.getPrototypeOf(v) === Object.prototype ? Object.keys(v).length > 0 : Boolean(v));
(function poll() {
    let value;
    try { value = condition.apply(null, args); } catch (e) { done({error: String(e)}); return; }
    if (truthy(value)) done({value: value});
    else if (Date.now() > deadline) done({timeout: true});
    else setTimeout(poll, 200);
})();
"""


def wait_for(driver, script: str, *args, what: str, timeout: float = WAIT_S):
    """Run `script` (a function body) in the page until it returns something truthy; returns that."""
    from selenium.common.exceptions import JavascriptException

    polled = f"const condition = function () {{\n{script}\n}};\n{POLL_IN_PAGE}"
    deadline = time.monotonic() + timeout
    while True:
        left_ms = max(0, int((deadline - time.monotonic()) * 1000))
        try:
            result = driver.execute_async_script(polled, *args, left_ms)
        except JavascriptException as error:       # the page navigated away mid-wait: wait on the new one
            if "unloaded" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.2)
            continue
        if "error" in result:
            raise JavascriptException(f"{result['error']} (waiting for {what})")
        if "value" in result:
            return result["value"]
        raise AssertionError(f"waited {timeout:.0f} s for {what}")


# Each script finds its notebook by path among the main area's widgets, and the
# commands act on the notebook JupyterLab tracks as current (open_notebook makes it so).
PANEL = """
const app = window.jupyterapp;
const panelOf = path => app && Array.from(app.shell.widgets('main'))
    .find(w => w.context && w.context.path === path && w.content && w.content.widgets);
"""

PANEL_PROMPT = PANEL + """
const panel = panelOf(arguments[0]);
if (!panel || !panel.context.isReady || !panel.isRevealed || !panel.content.widgets.length) return null;
return panel.content.widgets[0].node.querySelector('.jp-InputPrompt');
"""

IS_CURRENT = PANEL + "return app.shell.currentWidget === panelOf(arguments[0]);"

RUN_ALL = PANEL + """
const done = arguments[arguments.length - 1], panel = panelOf(arguments[0]);
panel.sessionContext.ready
    .then(() => app.commands.execute('notebook:run-all-cells'))
    .then(ok => done({ok: ok}), error => done({error: String(error)}));
"""

KERNEL_IDLE = PANEL + """
const session = panelOf(arguments[0]).sessionContext.session;
return session && session.kernel && session.kernel.status === 'idle';
"""

# [index, execution count, [ename: evalue of every error output]] of each code cell
CODE_CELLS = PANEL + """
const cells = panelOf(arguments[0]).content.model.cells, out = [];
for (let i = 0; i < cells.length; i++) {
    const cell = cells.get(i);
    if (cell.type !== 'code') continue;
    const errors = cell.outputs.toJSON().filter(o => o.output_type === 'error')
                                        .map(o => o.ename + ': ' + o.evalue);
    out.push([i, cell.executionCount, errors]);
}
return out;
"""

# arguments: path, the cell (its nbgrader grade id, or a line of its source), a new
# source for it or null; runs that cell from the page as Ctrl+Enter does (run, stay on the cell)
RUN_CELL = PANEL + """
const [path, key, source] = arguments, done = arguments[arguments.length - 1];
const notebook = panelOf(path).content;
const index = notebook.widgets.findIndex(c => (c.model.getMetadata('nbgrader') || {}).grade_id === key
                                              || c.model.sharedModel.getSource().split('\\n').includes(key));
if (index < 0) { done({error: 'no cell with grade_id or line ' + key}); return; }
if (source !== null) notebook.widgets[index].model.sharedModel.setSource(source);   // as typing it in would
notebook.activeCellIndex = index;
notebook.deselectAll();
app.commands.execute('notebook:run-cell')
    .then(() => done({index: index}), error => done({error: String(error)}));
"""

# what the page shows of a cell: scrolled into view first, since JupyterLab skips
# laying out cells off screen (their innerText is empty until they are shown)
CELL_TEXT = PANEL + """
const node = panelOf(arguments[0]).content.widgets[arguments[1]].node;
node.scrollIntoView({block: 'center'});
return node.innerText;
"""


def open_notebook(driver, path: str) -> None:
    """Wait for the notebook at `path` to load, then click its first cell's prompt, as
    a student would: until the page has focus JupyterLab has no current notebook.
    The click is retried while JupyterLab is still laying the notebook out."""
    from selenium.common.exceptions import WebDriverException

    def click_prompt():
        prompt = driver.execute_script(PANEL_PROMPT, path)
        if prompt is None:
            return False
        try:
            prompt.click()
        except WebDriverException:        # stale or not yet interactable: the cell is being rendered
            return False
        return driver.execute_script(IS_CURRENT, path)

    deadline = time.monotonic() + WAIT_S
    while not click_prompt():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {WAIT_S} s for JupyterLab to open {path} as its current notebook")
        time.sleep(0.3)


def run_all(driver, path: str) -> list:
    result = driver.execute_async_script(RUN_ALL, path)
    assert "error" not in result, f"Run All in {path}: {result['error']}"
    wait_for(driver, KERNEL_IDLE, path, what=f"the kernel of {path} to go idle")
    cells = driver.execute_script(CODE_CELLS, path)
    not_run = [i for i, count, _ in cells if count is None]
    failed = [(i, errors) for i, _, errors in cells if errors]
    assert not failed, f"Run All in {path}: cells raised {failed}"
    assert not not_run, f"Run All in {path} left cells {not_run} unrun"
    return cells


def our_errors(entries: list[dict]) -> list[dict]:
    """The SEVERE console entries. Nothing is filtered out: every script and
    request of the page is our stack (JupyterLab, its extensions, the course's
    widgets, the server); `OTHER_ORIGINS` checks the page asked no one else."""
    return [e for e in entries if e["level"] == "SEVERE"]


# every URL the page fetched (scripts, styles, fonts, API calls) that is not the lab's own server
OTHER_ORIGINS = """
return performance.getEntriesByType('resource').map(r => r.name)
    .filter(url => !url.startsWith(location.origin + '/') && !url.startsWith('data:'));
"""


# What the browser logs (as warnings) when an extension was built for another
# JupyterLab than the one installed: the sign of a pin that fell behind.
VERSION_MISMATCH = ("Unsatisfied version", "No satisfying version")


def version_warnings(entries: list[dict]) -> list[dict]:
    return [e for e in entries if any(phrase in e["message"] for phrase in VERSION_MISMATCH)]
