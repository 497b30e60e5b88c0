"""The README is the front door: its course map and commands match the repository."""
import re
from pathlib import Path

from threeaxes.course import COURSE_MAP, course_map_markdown

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_course_map_is_the_one_course_py_generates():
    assert course_map_markdown() in README, "README's map is stale: paste course_map_markdown() back in"


def test_every_link_in_the_readme_points_at_a_file_that_exists():
    for target in re.findall(r"\]\(([^)#]+)\)", README):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"README links to missing {target}"


def test_every_written_drop_is_released_and_linked():
    written = [d.folder for d in COURSE_MAP if d.folder]
    assert len(written) >= 4
    for folder in written:
        assert (ROOT / "release" / folder / f"{folder}.ipynb").exists()
        assert (ROOT / "source" / folder / f"{folder}.ipynb").exists()


def test_readme_names_the_commands_the_makefile_has():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lab", "test", "release", "grade", "grade-demo"):
        assert f"make {target}" in README and re.search(rf"^{target}:", makefile, re.M), target
