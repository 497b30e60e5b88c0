"""A running hub: `jupyterhub -f hub/jupyterhub_config.py` in its state folder, and what a test
or a benchmark asks of it through its REST API."""
from __future__ import annotations

import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from autograder.apps.hub.installer import HUB, SITE_VARIABLE, Install
from autograder.apps.hub.machine import HubError


class Hub:
    """A running hub: `jupyterhub -f hub/jupyterhub_config.py` in its state folder, its log in
    <state>/jupyterhub.log; `api(...)` calls its REST API with the class service's token."""

    def __init__(self, settings: dict, done: Install, wait: float = 120):
        self.settings, self.state = settings, Path(settings["state"])
        self.log = self.state / "jupyterhub.log"
        env = dict(os.environ)
        env["PATH"] = os.pathsep.join([str(done.venv / "bin"), env.get("PATH", "")])
        for var in [v for v in env if v.startswith("JUPYTER") or v == "PYTHONPATH"]:
            del env[var]
        env["THREEAXES_HUB_SETTINGS"] = str(self.state / "settings.json")
        env[SITE_VARIABLE] = settings.get("course_site", "")    # the hub runs on the course's tornado and more
        self.token = (self.state / "api_token").read_text().strip()
        self.started = time.perf_counter()
        self.process = subprocess.Popen([str(done.jupyterhub), "-f", str(HUB / "jupyterhub_config.py")],
                                        cwd=self.state, env=env, stdout=self.log.open("a"),
                                        stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise HubError(f"jupyterhub exited ({self.process.returncode}); its log, {self.log}:\n"
                               + self.log.read_text()[-4000:])
            try:
                self.api("GET", "/")
                self.start_seconds = time.perf_counter() - self.started
                return
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise HubError(f"jupyterhub did not answer within {wait:.0f} s; its log, {self.log}:\n"
                       + self.log.read_text()[-4000:])

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.settings["ip"] in ("", "0.0.0.0") else self.settings["ip"]
        return f"http://{host}:{self.settings['port']}"

    def request(self, method: str, path: str, body: object = None, timeout: float = 120,
                raw: bool = False) -> Any:
        """`path` under the hub's URL (/hub/api/..., /user/<name>/...), with the service token."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Authorization": f"token {self.token}",
                                              "Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=timeout) as reply:
            text = reply.read().decode()
        if raw:
            return text
        return json.loads(text) if text.strip() else None

    def api(self, method: str, path: str, body: object = None, timeout: float = 120) -> Any:
        return self.request(method, "/hub/api" + path, body, timeout)

    def spawn(self, name: str, wait: float = 180) -> float:
        """Start `name`'s server through the REST API; seconds until it answers."""
        t0 = time.perf_counter()
        try:
            self.api("POST", f"/users/{name}/server")
        except urllib.error.HTTPError as error:
            if error.code != 400:   # 400: already running
                raise
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            user = self.api("GET", f"/users/{name}")
            server = (user.get("servers") or {}).get("")
            if server and server.get("ready"):
                return time.perf_counter() - t0
            if not server or not server.get("pending"):
                if not server:
                    raise HubError(f"{name}'s server stopped while starting; the hub's log, {self.log}:\n"
                                   + self.log.read_text()[-3000:])
            time.sleep(0.3)
        raise HubError(f"{name}'s server did not start within {wait:.0f} s; see {self.log}")

    def stop(self) -> None:
        """SIGTERM: the hub stops the users' servers and its proxy, then exits."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, 9)
                self.process.wait()
