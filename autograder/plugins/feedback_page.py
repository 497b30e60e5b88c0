"""The exporter of the feedback pages (nbgrader_config.py: GenerateFeedback.exporter_class).

It is nbconvert's HTMLExporter (nbconvert 7.17, as pinned) but for the last pass of its
`from_notebook_node`, which parses the whole rendered page with BeautifulSoup to give each
`<img>` without an `alt` a placeholder one and each cell of the lab template a tabindex, then
writes the page out again: over half of a feedback page's time (8.7 of 14.3 s for 17 pages,
profiled). The course's template is the classic one, which has no lab cells; the images get the
same placeholder here, from one pass of a regular expression over the page's tags.
"""
from __future__ import annotations

import re
from typing import Any

from nbconvert.exporters import HTMLExporter, TemplateExporter
from nbconvert.filters.highlight import Highlight2HTML
from nbconvert.filters.widgetsdatatypefilter import WidgetsDataTypeFilter

PLACEHOLDER = "No description has been provided for this image"   # nbconvert's own words

# a <script> or <style> element (its text is not markup: passed over), or an <img> tag, whose
# quoted attribute values may hold a ">"
_SCRIPT_STYLE_OR_IMG = re.compile(
    r"""(<(script|style)\b.*?</\2\s*>)|<img\b((?:"[^"]*"|'[^']*'|[^'">])*)>""", re.IGNORECASE | re.DOTALL)
_QUOTED = re.compile(r""""[^"]*"|'[^']*'""")
_ALT = re.compile(r"(?:^|[\s/])alt(?:\s*=|[\s/]|$)", re.IGNORECASE)


def with_alt_text(html: str) -> tuple[str, int]:
    """`html` with PLACEHOLDER as the alt text of each `<img>` that has none, and how many."""
    added = 0

    def mend(match: re.Match[str]) -> str:
        nonlocal added
        attributes = match.group(3)
        if match.group(1) is not None or _ALT.search(_QUOTED.sub('""', attributes)):
            return match.group(0)
        added += 1
        return f'<img alt="{PLACEHOLDER}"{attributes}>'

    return _SCRIPT_STYLE_OR_IMG.sub(mend, html), added


class FeedbackPage(HTMLExporter):
    """HTMLExporter, its image alt text added without BeautifulSoup (the module docstring)."""

    def from_notebook_node(self, nb: Any, resources: dict[str, Any] | None = None,  # type: ignore[override]
                           **kw: Any) -> tuple[str, dict[str, Any]]:
        # HTMLExporter.from_notebook_node's set-up, as nbconvert 7.17 has it
        langinfo = nb.metadata.get("language_info", {})
        lexer = langinfo.get("pygments_lexer", langinfo.get("name", None))
        highlight_code = self.filters.get("highlight_code", Highlight2HTML(pygments_lexer=lexer, parent=self))
        resources = self._init_resources(resources)
        filter_data_type = WidgetsDataTypeFilter(notebook_metadata=self._nb_metadata, parent=self, resources=resources)
        self.register_filter("highlight_code", highlight_code)
        self.register_filter("filter_data_type", filter_data_type)
        html, resources = TemplateExporter.from_notebook_node(self, nb, resources, **kw)
        html, missing_alt = with_alt_text(html)
        if missing_alt:
            self.log.warning("Alternative text is missing on %s image(s).", missing_alt)
        return html, resources
