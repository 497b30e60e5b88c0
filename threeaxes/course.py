"""Facts about the course kept in one place: where the repository lives, and
the install cell under the title of every released notebook.

`INSTALL_CELL` is stamped right under the title of every notebook by
`autograder.apps.release`; a test checks that each committed notebook carries
exactly this text, so changing the URL here (for a fork) and running
`make release` updates every notebook.
"""
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


# The 14 drops: (number, phase, title, assignment folder or None while unwritten).
PHASES = {
    1: "The three axes you can split",
    2: "Tracing four GPUs, three ways",
    3: "Cost models and when OOM hits",
    4: "Sizing a 70B cluster",
    5: "Beyond the three axes",
}
DROPS = [
    (1, 1, "Three different things people call 'parallel'", "drop01-three-kinds-of-parallel"),
    (2, 1, "Same model, different examples, sum the gradients", "drop02-data-parallel"),
    (3, 1, "Cut the matmul, not the batch", "drop03-tensor-parallel"),
    (4, 1, "Stack the layers across machines", "drop04-pipeline-parallel"),
    (5, 2, "One forward pass under pure data parallelism, and the backward after it",
     "drop05-data-parallel-trace"),
    (6, 2, "Activations crossing the fabric every layer", "drop06-tensor-parallel-trace"),
    (7, 2, "Microbatches filling the pipeline", "drop07-pipeline-trace"),
    (8, 2, "Stack DP, TP, and PP on the same eight GPUs", "drop08-3d-parallel"),
    (9, 2, "Counting bytes per GPU under each regime", "drop09-bytes-per-gpu"),
    (10, 3, "Your 13B training run just crashed at step 4,000", "drop10-oom-at-step-4000"),
    (11, 3, "Your throughput dropped 40% after moving to a bigger cluster", "drop11-slower-bigger-cluster"),
    (12, 3, "Your pipeline has a 35% bubble and you can't increase M", "drop12-bubble-fixed-m"),
    (13, 3, "Choose (DP, TP, PP) for a 30B model on 32 GPUs", "drop13-size-30b-on-32"),
    (14, 4, "Defend a (DP, TP, PP) tuple for a 70B model on 64 GPUs", "drop14-defend-70b-on-64"),
    (15, 5, "Split the sequence: ring attention and all-to-all", "drop15-context-parallel"),
    (16, 5, "Tokens travel to their experts", "drop16-expert-parallel"),
]

# The minutes of each drop's core, as the course plan gives them (autograder/drop_minutes.py
# measures the cores against them, tests/autograder/test_drop_minutes.py too).
MINUTES = {1: 6, 2: 6, 3: 7, 4: 7, 5: 7, 6: 7, 7: 7, 8: 8, 9: 7, 10: 7, 11: 7, 12: 8, 13: 8, 14: 8, 15: 8, 16: 8}

# Each drop's points, (core, extra credit): the graded cells of its core are the drop's grade,
# those of its "Going deeper" sections extra credit (hand-graded written answers included).
# Every drop is split (issue 34).
POINTS = {1: (2, 5), 2: (3, 3), 3: (3, 3), 4: (2, 5), 5: (1, 6), 6: (2, 3), 7: (2, 3), 8: (2, 4),
          9: (2, 4), 10: (3, 5), 11: (3, 5), 12: (4, 4), 13: (4, 5), 14: (4, 5), 15: (2, 0),
          16: (2, 0)}


def points_text(number: int) -> str:
    core, extra = POINTS[number]
    return f"{core} + {extra} extra credit" if extra else f"{core}"


def course_map_markdown(link_prefix: str = "release/", column: tuple[str, dict] | None = None) -> str:
    """The course map as a Markdown table; released drops link to their notebook. Each row
    gives the minutes of the drop's core and its points: the core's, which are the drop's
    grade, and the "Going deeper" sections', which are extra credit. `column`, (heading,
    {drop number: text}), adds a last column (the start page's progress)."""
    heading, texts = column or (None, {})
    rows = ["| phase | drop | title | minutes | points |" + (f" {heading} |" if heading else ""),
            "| --- | --- | --- | --- | --- |" + (" --- |" if heading else "")]
    for number, phase, title, folder in DROPS:
        cell = f"[{title}]({link_prefix}{folder}/{folder}.ipynb)" if folder else f"{title} *(not written yet)*"
        rows.append(f"| {phase} {PHASES[phase]} | {number} | {cell} | {MINUTES[number]} | {points_text(number)} |"
                    + (f" {texts.get(number, '')} |" if heading else ""))
    return "\n".join(rows)
