"""The class's hub in Chromium, for tests/browser/test_hub_class.py: the hub's login form,
nbgrader's Assignments tab (its lists and buttons, by the ids and texts nbgrader's lab
extension gives them), saving a notebook, and a screenshot of every step."""
from __future__ import annotations

import time
from pathlib import Path

from lab_page import WAIT_S, wait_for, wait_for_python

COURSE = "three-axes"
LISTS = {"released": "released_assignments_list", "fetched": "fetched_assignments_list",
         "submitted": "submitted_assignments_list"}

APP_READY = "return !!(window.jupyterapp && window.jupyterapp.shell && document.querySelector('#jp-main-dock-panel'));"

# a row of one of the tab's lists that names the drop: {text, buttons}, or null
ROW = """
const [listId, name] = arguments;
const list = document.getElementById(listId);
if (!list) return null;
const row = [...list.querySelectorAll('.list_item')].find(r => r.innerText.includes(name));
if (!row) return null;
return {text: row.innerText, buttons: [...row.querySelectorAll('button')].map(b => b.innerText)};
"""

# click the button of that row whose text is arguments[2]
CLICK = """
const [listId, name, label] = arguments;
const row = [...document.getElementById(listId).querySelectorAll('.list_item')].find(r => r.innerText.includes(name));
const button = row && [...row.querySelectorAll('button')].find(b => b.innerText.trim() === label);
if (!button) return false;
button.click();
return true;
"""

# the link the fetched row shows for each of the drop's notebooks (it opens the notebook)
OPEN_FROM_TAB = """
const [name, notebook] = arguments;
const list = document.getElementById('fetched_assignments_list');
// the notebook's own link (href '#'), not the row's collapse toggle, which shows the drop's name too
const link = [...list.querySelectorAll('a')].find(a => a.getAttribute('href') === '#'
                                                    && a.textContent.trim() === notebook);
if (!link) return false;
link.click();
return true;
"""

LIST_TEXT = "const l = document.getElementById(arguments[0]); return l ? l.innerText : null;"

SET_SOURCE = """
const app = window.jupyterapp, [path, key, source] = arguments;
const panel = Array.from(app.shell.widgets('main')).find(w => w.context && w.context.path === path);
const cell = panel.content.widgets.find(c => (c.model.getMetadata('nbgrader') || {}).grade_id === key);
if (!cell) return 'no cell ' + key;
cell.model.sharedModel.setSource(source);     // as typing it in would
return null;
"""

SAVE = """
const app = window.jupyterapp, done = arguments[arguments.length - 1];
const panel = Array.from(app.shell.widgets('main')).find(w => w.context && w.context.path === arguments[0]);
panel.context.save().then(() => done(!panel.context.model.dirty), e => done(String(e)));
"""


class Shots:
    """A numbered screenshot after each step, in `folder`."""

    def __init__(self, driver, folder: Path):
        self.driver, self.folder, self.n = driver, folder, 0
        folder.mkdir(parents=True, exist_ok=True)

    def __call__(self, what: str) -> None:
        self.n += 1
        name = "".join(ch if ch.isalnum() else "-" for ch in what)[:60]
        try:
            self.driver.save_screenshot(str(self.folder / f"{self.n:02d}-{name}.png"))
        except Exception:  # noqa: BLE001 (a screenshot must never hide the step's own failure)
            pass


def log_in(driver, hub_url: str, name: str, password: str) -> None:
    """The hub's login form, then JupyterLab of `name`'s server (started already or now)."""
    if "/user/" in driver.current_url:        # someone is logged in: the hub's logout, then no cookie
        driver.get(f"{hub_url}/hub/logout")   # of theirs left (a server's cookie has its own path)
    driver.execute_cdp_cmd("Network.clearBrowserCookies", {})
    driver.get(f"{hub_url}/hub/login")
    wait_for(driver, "return document.getElementById('username_input');", what="the hub's login form")
    driver.find_element("id", "username_input").send_keys(name)
    driver.find_element("id", "password_input").send_keys(password)
    driver.find_element("id", "login_submit").click()
    wait_for_python(lambda: f"/user/{name}/lab" in driver.current_url, what=f"{name}'s JupyterLab after login")
    wait_for(driver, APP_READY, what=f"JupyterLab of {name} to start")


def open_assignments_tab(driver) -> None:
    """nbgrader's Assignments tab (its command, as the Nbgrader menu runs it); waits until
    its lists have loaded (the loading line hidden)."""
    driver.execute_script("window.jupyterapp.commands.execute('nbgrader:open-assignment-list');")
    wait_for(driver, """
        const l = document.getElementById('released_assignments_list_loading');
        return l && l.hidden && document.getElementById('fetched_assignments_list_loading').hidden
               && document.getElementById('submitted_assignments_list_loading').hidden;""",
             what="the Assignments tab to load its lists")


def row(driver, which: str, drop: str, timeout: float = WAIT_S) -> dict:
    return wait_for(driver, ROW, LISTS[which], drop, what=f"{drop} in the tab's {which} list", timeout=timeout)


def click(driver, which: str, drop: str, label: str) -> None:
    wait_for(driver, CLICK, LISTS[which], drop, label, what=f"the {label} button of {drop} ({which} list)")


def save(driver, path: str) -> None:
    saved = driver.execute_async_script(SAVE, path)
    assert saved is True, f"saving {path}: {saved}"


def pause(seconds: float) -> None:
    time.sleep(seconds)
