"""autograder/plugins/feedback_page.py: the feedback pages as nbconvert's HTMLExporter writes them,
without its BeautifulSoup pass; BeautifulSoup reads both here, as the reference."""
import nbformat
from bs4 import BeautifulSoup
from nbconvert import HTMLExporter

from autograder.plugins.feedback_page import PLACEHOLDER, FeedbackPage, with_alt_text

PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==")


def _images(html):
    return [dict(img.attrs) for img in BeautifulSoup(html, "html.parser").find_all("img")]


def test_each_image_without_alt_text_gets_nbconverts_placeholder_and_no_other_changes():
    html = ('<p>a</p><img src="x.png"><IMG SRC="y.png" ALT="kept"><img alt src="z.png">'
            '<img title="a > b" src="w.png"/><img data-alt="not it" src="v.png">'
            '<script>var s = "<img src=no.png>";</script><style>/* <img src=no.png> */</style>')
    mended, added = with_alt_text(html)
    assert added == 3
    assert _images(mended) == [
        {"alt": PLACEHOLDER, "src": "x.png"}, {"src": "y.png", "alt": "kept"}, {"alt": "", "src": "z.png"},
        {"alt": PLACEHOLDER, "title": "a > b", "src": "w.png"},
        {"alt": PLACEHOLDER, "data-alt": "not it", "src": "v.png"}]
    assert '<script>var s = "<img src=no.png>";</script><style>/* <img src=no.png> */</style>' in mended


def _notebook():
    code = nbformat.v4.new_code_cell("plot()\nprint('<b>', 2 > 1)")
    code.outputs = [nbformat.v4.new_output("display_data", data={"image/png": PNG, "text/plain": "<Figure>"}),
                    nbformat.v4.new_output("stream", text="<b> True\n"),
                    nbformat.v4.new_output("display_data", data={"text/html": "<i>shown</i><img src='x.png'>"})]
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Drop\n![a plot](p.png) and *text*"), code],
                                    metadata={"language_info": {"name": "python"}})


def test_a_page_reads_as_the_one_nbconvert_writes():
    ours, _ = FeedbackPage(template_name="classic").from_notebook_node(_notebook())
    theirs, _ = HTMLExporter(template_name="classic").from_notebook_node(_notebook())
    mine, reference = BeautifulSoup(ours, "html.parser"), BeautifulSoup(theirs, "html.parser")
    assert mine.get_text() == reference.get_text()
    assert [t.name for t in mine.find_all(True)] == [t.name for t in reference.find_all(True)]
    assert _images(ours) == _images(theirs)
    assert [i["alt"] for i in _images(ours)] == ["a plot", PLACEHOLDER, PLACEHOLDER]
