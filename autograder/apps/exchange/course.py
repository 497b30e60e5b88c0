"""The course as nbgrader's exchange sees it: its config, exchange folders and gradebook,
and nbgrader's API on it."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from autograder.apps.grade import gradebook_url
from autograder.course import ROOT

if TYPE_CHECKING:
    from nbgrader.api import Gradebook
    from nbgrader.apps.api import NbGraderAPI

CONFIG = "nbgrader_config.py"


@dataclass(frozen=True)
class Course:
    root: Path
    course_id: str
    exchange: Path     # c.Exchange.root: <exchange>/<course_id>/{outbound,inbound,feedback}
    db_url: str
    config: object = field(repr=False, compare=False)   # nbgrader's merged traitlets Config

    @property
    def outbound(self) -> Path:
        return self.exchange / self.course_id / "outbound"

    @property
    def inbound(self) -> Path:
        return self.exchange / self.course_id / "inbound"

    def gradebook(self) -> Gradebook:
        from nbgrader.api import Gradebook
        return Gradebook(self.db_url, self.course_id)


def load_course(root: Path = ROOT) -> Course:
    """The course as nbgrader's commands see it from `root`: the config files in
    nbgrader's order (system folders, ~/.jupyter, then the course's own, which wins)."""
    from jupyter_core.paths import jupyter_config_path
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.exchange.default import Exchange
    from traitlets.config import Config
    from traitlets.config.loader import PyFileConfigLoader

    root = Path(root).resolve()
    config = Config()
    for folder in [*reversed(jupyter_config_path()), str(root)]:
        if (Path(folder) / CONFIG).is_file():
            config.merge(PyFileConfigLoader(CONFIG, path=folder).load_config())
    config.CourseDirectory.root = str(root)
    db_url = gradebook_url(root, config)
    config.CourseDirectory.db_url = db_url
    course_id = CourseDirectory(config=config).course_id
    return Course(root, course_id, Path(Exchange(config=config).root), db_url, config)


def nbgrader_api(course: Course, **settings: object) -> NbGraderAPI:
    """nbgrader's API on the course; `settings`: {"Section.key": value} on top of its config."""
    from nbgrader.apps.api import NbGraderAPI
    from nbgrader.coursedir import CourseDirectory
    from traitlets.config import Config

    config = Config(course.config)
    # collect never follows a link a student wrote into inbound/ (autograder/plugins/safe_collect.py)
    config.ExchangeFactory.collect = "autograder.plugins.safe_collect.SafeCollect"
    for key, value in settings.items():
        section, name = key.split(".")
        config[section][name] = value
    return NbGraderAPI(coursedir=CourseDirectory(config=config), config=config)


def logged_ok(result: dict, what: str) -> str:
    """The log of an NbGraderAPI call; what nbgrader said, when it failed."""
    if not result.get("success"):
        said = (result.get("log") or "") + (result.get("error") or "")
        raise SystemExit(f"nbgrader {what} failed:\n{said[-3000:]}")
    return result.get("log") or ""
