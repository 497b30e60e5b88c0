"""Facts about the course kept in one place: where the repository lives, the install
cell under the title of every released notebook, and the course map (`COURSE_MAP`, one
`Drop` record a drop, which the README's map is generated from).

`INSTALL_CELL` is stamped right under the title of every notebook by
`autograder.apps.release`; a test checks that each committed notebook carries
exactly this text, so changing the URL here (for a fork) and running
`make release` updates every notebook.
"""
from dataclasses import dataclass

REPO_URL = "https://github.com/three-axes/three-axes"

# The pip requirement used when `threeaxes` is not importable (Colab, a bare
# kernel). THREEAXES_PIP_SPEC overrides it, e.g. with a local checkout's path.
PIP_SPEC = f"threeaxes @ git+{REPO_URL}"

INSTALL_CELL = f'''\
# Setup: installs the course package when it is missing (Colab, a fresh kernel).
# On a machine set up with `make lab` this does nothing.
try:
    import threeaxes
except ImportError:
    import os, subprocess, sys
    spec = os.environ.get("THREEAXES_PIP_SPEC", "{PIP_SPEC}")
    subprocess.check_call([sys.executable, "-m", "pip", "install", "-q", spec])
    import threeaxes'''


def is_install_cell(cell: dict) -> bool:
    """The install cell, known by its id or its text, wherever it stands (right under the
    title in every notebook the course ships)."""
    return cell.get("id") == "install-threeaxes" or "".join(cell["source"]) == INSTALL_CELL


PHASES = {
    1: "The three axes you can split",
    2: "Tracing four GPUs, three ways",
    3: "Cost models and when OOM hits",
    4: "Sizing a 70B cluster",
    5: "Beyond the three axes",
}


@dataclass(frozen=True)
class Drop:
    """One line of the course map. `folder` is the assignment's folder (None while the drop is
    unwritten); `minutes` those of its core, as the course plan gives them (autograder/drop_minutes.py
    measures the core against them); `points` (core, extra credit): the graded cells of its core are
    the drop's grade, those of its "Going deeper" sections extra credit (hand-graded written answers
    included)."""

    number: int
    phase: int
    title: str
    folder: str | None
    minutes: int
    points: tuple[int, int]

    def __post_init__(self) -> None:
        if self.phase not in PHASES:
            raise ValueError(f"drop {self.number}: phase {self.phase} is not one of PHASES {sorted(PHASES)}; "
                             "add the phase to PHASES or pick one of those")
        prefix = f"drop{self.number:02d}-"
        if self.folder is not None and not self.folder.startswith(prefix):
            raise ValueError(f"drop {self.number}: folder {self.folder!r} should start with {prefix!r}")
        if self.minutes <= 0:
            raise ValueError(f"drop {self.number}: minutes must be positive, not {self.minutes}")
        if len(self.points) != 2 or min(self.points) < 0:
            raise ValueError(f"drop {self.number}: points are (core, extra credit), two counts of 0 or more, "
                             f"not {self.points}")

    @property
    def points_text(self) -> str:
        core, extra = self.points
        return f"{core} + {extra} extra credit" if extra else f"{core}"


def numbered(drops: tuple[Drop, ...]) -> tuple[Drop, ...]:
    """The drops, checked to be numbered 1, 2, 3, ... in order (the map's rows and `drop()` rely on it)."""
    numbers = [d.number for d in drops]
    if numbers != list(range(1, len(drops) + 1)):
        raise ValueError(f"the course map's drops are numbered {numbers}; number them 1 to {len(drops)} in order")
    return drops


# The course map, one record a drop: a new drop adds its line here and nothing else in this module.
# Drop(number, phase, title, folder, minutes of the core, (core points, extra credit))
COURSE_MAP = numbered((
    Drop(1, 1, "Three different things people call 'parallel'", "drop01-three-kinds-of-parallel", 6, (2, 5)),
    Drop(2, 1, "Same model, different examples, sum the gradients", "drop02-data-parallel", 6, (3, 3)),
    Drop(3, 1, "Cut the matmul, not the batch", "drop03-tensor-parallel", 7, (3, 3)),
    Drop(4, 1, "Stack the layers across machines", "drop04-pipeline-parallel", 7, (2, 5)),
    Drop(5, 2, "One forward pass under pure data parallelism, and the backward after it",
         "drop05-data-parallel-trace", 7, (1, 6)),
    Drop(6, 2, "Activations crossing the fabric every layer", "drop06-tensor-parallel-trace", 7, (2, 3)),
    Drop(7, 2, "Microbatches filling the pipeline", "drop07-pipeline-trace", 7, (2, 3)),
    Drop(8, 2, "Stack DP, TP, and PP on the same eight GPUs", "drop08-3d-parallel", 8, (2, 4)),
    Drop(9, 2, "Counting bytes per GPU under each regime", "drop09-bytes-per-gpu", 7, (2, 4)),
    Drop(10, 3, "Your 13B training run just crashed at step 4,000", "drop10-oom-at-step-4000", 7, (3, 5)),
    Drop(11, 3, "Your throughput dropped 40% after moving to a bigger cluster", "drop11-slower-bigger-cluster",
         7, (3, 5)),
    Drop(12, 3, "Your pipeline has a 35% bubble and you can't increase M", "drop12-bubble-fixed-m", 8, (4, 4)),
    Drop(13, 3, "Choose (DP, TP, PP) for a 30B model on 32 GPUs", "drop13-size-30b-on-32", 8, (4, 5)),
    Drop(14, 4, "Defend a (DP, TP, PP) tuple for a 70B model on 64 GPUs", "drop14-defend-70b-on-64", 8, (4, 5)),
    Drop(15, 5, "Split the sequence: ring attention and all-to-all", "drop15-context-parallel", 8, (2, 0)),
    Drop(16, 5, "Tokens travel to their experts", "drop16-expert-parallel", 8, (2, 0)),
))


def drop(number: int) -> Drop:
    """The course map's drop `number`."""
    if not 1 <= number <= len(COURSE_MAP):
        raise LookupError(f"the course has drops 1 to {len(COURSE_MAP)}, not {number}")
    return COURSE_MAP[number - 1]


# Views kept for readers that cannot switch to the records: notebooks/practice.ipynb unpacks
# (number, phase, title, folder) from DROPS, and tests/drops/test_top_row_scores_half.py and
# tests/autograder/test_grade_script.py read POINTS[number]. Both follow COURSE_MAP; edit that.
DROPS = [(d.number, d.phase, d.title, d.folder) for d in COURSE_MAP]
POINTS = {d.number: d.points for d in COURSE_MAP}


def course_map_markdown(link_prefix: str = "release/", column: tuple[str, dict] | None = None) -> str:
    """The course map as a Markdown table; released drops link to their notebook. Each row
    gives the minutes of the drop's core and its points: the core's, which are the drop's
    grade, and the "Going deeper" sections', which are extra credit. `column`, (heading,
    {drop number: text}), adds a last column (the start page's progress)."""
    heading, texts = column or (None, {})
    rows = ["| phase | drop | title | minutes | points |" + (f" {heading} |" if heading else ""),
            "| --- | --- | --- | --- | --- |" + (" --- |" if heading else "")]
    for d in COURSE_MAP:
        link = f"{link_prefix}{d.folder}/{d.folder}.ipynb"
        cell = f"[{d.title}]({link})" if d.folder else f"{d.title} *(not written yet)*"
        rows.append(f"| {d.phase} {PHASES[d.phase]} | {d.number} | {cell} | {d.minutes} | {d.points_text} |"
                    + (f" {texts.get(d.number, '')} |" if heading else ""))
    return "\n".join(rows)
