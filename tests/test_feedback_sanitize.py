"""The student's markup made inert in what the grading writes (autograder/feedback.py); the
whole path, through nbgrader, is in tests/test_grade_script.py."""
import nbformat

from autograder.feedback import SanitizeStudentMarkup

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
    assert nb.cells[2].source == 'my answer <img src="x">s()'
    assert nb.cells[3].source == "raw()"
