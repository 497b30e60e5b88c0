"""The student's markup made inert in what the grading writes (autograder/plugins/feedback.py,
autograder/plugins/inert.py); the whole path, through nbgrader, is in tests/autograder/test_grade_script.py and
tests/autograder/test_grading_attacks_routes.py, the pages in a browser in tests/browser/test_inert_pages.py."""
import nbformat
import pytest
from nbconvert import HTMLExporter
from nbconvert.filters.markdown_mistune import markdown2html_mistune

from autograder.plugins import inert
from autograder.plugins.feedback import SanitizeStudentMarkup

DROP = "drop01-three-kinds-of-parallel"


def _cleaned(cells, tmp_path, monkeypatch, source_cells=()):
    folder = tmp_path / "source" / DROP
    folder.mkdir(parents=True)
    source = nbformat.v4.new_notebook()
    source.cells = list(source_cells)
    nbformat.write(source, folder / f"{DROP}.ipynb")
    monkeypatch.chdir(tmp_path)   # nbgrader runs in the course root
    nb = nbformat.v4.new_notebook()
    nb.cells = cells
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    nb, _ = SanitizeStudentMarkup().preprocess(nb, {"nbgrader": {"assignment": DROP, "notebook": DROP}})
    return nb


def test_outputs_keep_text_and_images_and_lose_what_runs(tmp_path, monkeypatch):
    cell = nbformat.v4.new_code_cell("shown()")
    cell.outputs = [
        nbformat.v4.new_output("display_data", data={
            "text/html": ["<b>bold</b><script>alert(1)</script>", "<img src=x onerror=alert(2)>"],
            "text/plain": ["a\n", "b"], "image/png": "iVBOR"}),
        nbformat.v4.new_output("execute_result", execution_count=1, data={
            "text/html": "<a href='javascript:alert(3)'>link</a><iframe src=x></iframe>",
            "application/javascript": "alert(4)", "image/svg+xml": "<svg onload=alert(5)>",
            "application/vnd.jupyter.widget-view+json": {"model_id": "m"}, "text/plain": "3"}),
        nbformat.from_dict({"output_type": "display_data", "metadata": {}}),   # no data: dropped
        nbformat.v4.new_output("stream", text="<script>printed, escaped by the page</script>"),
    ]
    nb = _cleaned([cell], tmp_path, monkeypatch)
    first, second, stream = nb.cells[0].outputs
    assert first.data == {"text/html": '<b>bold</b>alert(1)<img src="x">', "text/plain": ["a\n", "b"],
                          "image/png": "iVBOR"}
    assert second.data == {"text/html": "<a>link</a>", "text/plain": "3"}   # the score's text stays
    assert stream.output_type == "stream"
    assert "widgets" not in nb.metadata


def test_markdown_is_cleaned_unless_it_is_the_instructors(tmp_path, monkeypatch):
    instructors = nbformat.v4.new_markdown_cell("<details><summary>hint</summary>a < b</details>")
    locked = nbformat.v4.new_markdown_cell("<script>locked()</script>")
    locked.metadata["nbgrader"] = {"locked": True, "solution": False, "grade_id": "intro"}
    answer = nbformat.v4.new_markdown_cell("my answer <img src=x onerror=alert(1)><script>s()</script>")
    answer.metadata["nbgrader"] = {"locked": False, "solution": True, "grade": True, "grade_id": "why"}
    added = nbformat.v4.new_raw_cell("<script>raw()</script>")
    nb = _cleaned([nbformat.from_dict(instructors), locked, answer, added], tmp_path, monkeypatch,
                  source_cells=[instructors])
    assert nb.cells[0].source == instructors.source   # the instructor's text, as written
    assert nb.cells[1].source == locked.source        # nbgrader restores locked cells from the source
    assert nb.cells[2].source == '<div>\n<p>my answer <img src="x">s()</p>\n</div>'
    assert nb.cells[3].source == "raw()"


# each a way to run script from a written answer once the page renders it as markdown
MARKDOWN_ATTACKS = {
    "link": "[x](javascript:alert(1))",
    "mixed case": "[x](JaVaScRiPt:alert(1))",
    "entity": "[x](java&#115;cript:alert(1))",
    "reference": "[x][r]\n\n[r]: javascript:alert(2)",
    "autolink": "<javascript:alert(3)>",
    "html link": '<a href="javascript:alert(4)">x</a>',
    "data page": "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCg1KTwvc2NyaXB0Pg==)",
    "handler": "<img src=x onerror=alert(6)>",
    "mathjax href": "$\\href{javascript:alert(7)}{x}$",
    "mathjax macro": "$\\def\\h{\\href}\\h{javascript:alert(10)}{x}$",
}


@pytest.mark.parametrize("text", MARKDOWN_ATTACKS.values(), ids=MARKDOWN_ATTACKS.keys())
def test_a_written_answer_renders_inert(text):
    assert inert.problems(markdown2html_mistune(text)), f"{text!r} rendered as it is is no attack"
    after = markdown2html_mistune(inert.clean_markdown(text))
    assert inert.is_inert(after), inert.problems(after)


@pytest.mark.parametrize("text", ["<p>$&#92;href{javascript:alert(8)}{x}$</p>",
                                  "<p>$\\<b></b>href{javascript:alert(9)}{x}$</p>",
                                  "<p>$&#x5C;class{x}{y}$ <a href='java&#x09;script:alert(1)'>z</a></p>"])
def test_html_output_loses_mathjax_links_however_spelled(text):
    cleaned = inert.clean_html(text)
    assert "{javascript:" in cleaned or "class{x}" in cleaned      # the text stays, as text
    assert inert.is_inert(cleaned), inert.problems(cleaned)
    assert "\\href" not in cleaned and "&#92;" not in cleaned and "&#x5C;" not in cleaned


def test_what_is_allowed_stays():
    kept = inert.clean_markdown("**bold** [site](https://example.org) $\\frac{a}{b}$ "
                                "![plot](data:image/png;base64,iVBOR==)\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    page = markdown2html_mistune(kept)
    assert '<a href="https://example.org">site</a>' in page and "<strong>bold</strong>" in page
    assert "\\frac{a}{b}" in page and 'src="data:image/png;base64,iVBOR=="' in page and "<td>2</td>" in page
    assert not inert.safe_url("data:image/svg+xml;base64,PHN2Zz4=", image=True)
    assert not inert.safe_url("data:image/png;base64,iVBOR==")      # an image's data, not a link's
    assert inert.safe_url("#anchor") and inert.safe_url("mailto:a@b.c")


def _image_output(metadata):
    return nbformat.v4.new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"},
                                  metadata=metadata)


def test_an_images_metadata_keeps_only_numeric_sizes(tmp_path, monkeypatch):
    cell = nbformat.v4.new_code_cell("shown()")
    cell.outputs = [
        _image_output({"image/png": {"width": "1 onerror=alert(1)", "height": 200, "unconfined": True},
                       "width": "1 onerror=alert(2)", "filenames": {"image/png": "javascript:alert(3)"}}),
        _image_output({"image/png": {"width": 320.5, "height": True}, "text/html": {"isolated": True}}),
        nbformat.v4.new_output("execute_result", execution_count=1, data={
            "text/latex": "$\\href{javascript:alert(4)}{x}$", "text/markdown": "[y](javascript:alert(5))",
            "text/plain": "3"}),
    ]
    cell.outputs[2]["execution_count"] = "<script>alert(6)</script>"
    cell.execution_count = "<script>alert(7)</script>"
    nb = _cleaned([cell], tmp_path, monkeypatch)
    first, second, third = nb.cells[0].outputs
    assert first.metadata == {"image/png": {"height": 200}}
    assert second.metadata == {"image/png": {"width": 320.5}}
    assert third.data["text/latex"] == "$href{javascript:alert(4)}{x}$"
    assert third.execution_count is None and nb.cells[0].execution_count is None
    page, _ = HTMLExporter(template_name="classic").from_notebook_node(nb)
    assert "onerror" not in page and "alert(6)" not in page and "alert(7)" not in page
    body = page[page.index("<body"):]       # the page's head holds nbconvert's own scripts
    assert 'href="javascript' not in body and 'width="320.5"' in body


def test_a_grade_id_no_instructor_could_write_loses_its_nbgrader_metadata(tmp_path, monkeypatch):
    """The formgrader writes a cell's grade id into an attribute unescaped."""
    hostile = nbformat.v4.new_markdown_cell("notes")
    hostile.metadata["nbgrader"] = {"grade": True, "solution": True, "points": 1,
                                    "grade_id": 'x" autofocus onfocus="alert(1)'}
    honest = nbformat.v4.new_markdown_cell("why")
    honest.metadata["nbgrader"] = {"grade": True, "solution": True, "points": 1, "grade_id": "why-it_works2"}
    nb = _cleaned([hostile, honest], tmp_path, monkeypatch)
    assert "nbgrader" not in nb.cells[0].metadata
    assert nb.cells[1].metadata["nbgrader"]["grade_id"] == "why-it_works2"
