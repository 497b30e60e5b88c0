"""A student's markup made inert: what a page may show of it, as an allowlist.

Everything a submission puts on a page someone opens (its outputs, its written answers) goes
through here (`autograder.plugins.feedback.SanitizeStudentMarkup`, in the autograde chain and again in
the feedback's):

- HTML keeps the tags of `TAGS` and the attributes of `ATTRIBUTES`, no `on*` handler, no style;
  a link or an image keeps its URL only for the schemes of `SCHEMES` (an image also a `data:`
  PNG, JPEG or GIF), after the browser's own reading of it (entities decoded, tabs, newlines
  and other control characters dropped, any case);
- markdown is rendered as the page renders it (nbconvert's mistune), that HTML cleaned as
  above, and kept as one HTML block, so a `[x](javascript:...)` link, a reference definition
  or an autolink reaches the page as an inert link; where the page would still render it
  otherwise, the text is shown as text;
- TeX the page's MathJax would typeset loses the backslash of every macro that makes a link,
  sets a class, a style or an id, loads an extension or defines a macro (`\\href{javascript:...}`
  becomes the text "href"), the backslash written as an entity or split by a tag included;
- an output's metadata keeps only a numeric width and height per image type: nbconvert writes
  them unquoted (`width=...`), so a string there is an attribute of the page's own.
"""
from __future__ import annotations

import html
import math
import re
from html.parser import HTMLParser
from typing import Any

import bleach
from bleach.sanitizer import ALLOWED_ATTRIBUTES, ALLOWED_TAGS

# enough for a DataFrame, a formatted result or a student's written answer; nothing that runs
TAGS = frozenset(set(ALLOWED_TAGS) | {
    "p", "br", "hr", "div", "span", "pre", "sub", "sup", "del", "ins", "kbd", "samp", "var", "small",
    "h1", "h2", "h3", "h4", "h5", "h6", "dl", "dt", "dd", "details", "summary",
    "table", "thead", "tbody", "tfoot", "tr", "th", "td", "caption", "colgroup", "col", "img"})
ATTRIBUTES = {**{tag: set(names) for tag, names in ALLOWED_ATTRIBUTES.items()}, "*": {"class", "title"},
              "img": {"src", "alt", "width", "height"},
              "th": {"colspan", "rowspan", "align"}, "td": {"colspan", "rowspan", "align"}}
SCHEMES = frozenset({"http", "https", "mailto"})
IMAGE_SCHEMES = SCHEMES | {"attachment"}      # a written answer's pasted image
_IMAGE_DATA = re.compile(r"data:image/(png|jpeg|gif);base64,[A-Za-z0-9+/=]*", re.I)
_SCHEME = re.compile(r"([a-z][a-z0-9+.\-]*):")
_CONTROL = re.compile(r"[\x00-\x20\x7f]+")

# MathJax macros that make a link, a class, a style or an id, load code or define macros
TEX_MACROS = ("href", "url", "class", "cssId", "style", "unicode", "require", "data", "html", "bbox",
              "csname", "def", "gdef", "edef", "let", "newcommand", "renewcommand", "DeclareMathOperator",
              "mmlToken", "toggle", "mathtip", "texttip", "mathlink")
_BACKSLASH = r"(?i:\\|&#0*92;?|&#x0*5c;?|&bsol;|&Backslash;)"
_TEX = re.compile(_BACKSLASH + r"((?:\s|<[^>]*>)*)(?=(?:" + "|".join(TEX_MACROS) + r")(?![A-Za-z]))")


def safe_url(value: str, image: bool = False) -> bool:
    """Whether a link (an image's source where `image`) may keep `value`: no scheme (a relative
    URL), or an allowed one as a browser reads it."""
    text = _CONTROL.sub("", html.unescape(str(value)))
    found = _SCHEME.match(text.lower())
    if not found:
        return True
    if found.group(1) == "data":
        return image and _IMAGE_DATA.fullmatch(text) is not None
    return found.group(1) in (IMAGE_SCHEMES if image else SCHEMES)


def allowed_attribute(tag: str, name: str, value: str) -> bool:
    name = name.lower()
    if name.startswith("on") or not (name in ATTRIBUTES.get(tag, ()) or name in ATTRIBUTES["*"]):
        return False
    if name in ("href", "src"):
        return safe_url(value, image=(tag == "img"))
    return True


def strip_tex(text: str) -> str:
    """`text` with the backslash of every macro of TEX_MACROS taken out."""
    return _TEX.sub(lambda m: m.group(1), text)


_CLEANER = bleach.Cleaner(tags=TAGS, attributes=allowed_attribute, protocols=sorted(IMAGE_SCHEMES | {"data"}),
                          strip=True, strip_comments=True)


def clean_html(text: str) -> str:
    return strip_tex(_CLEANER.clean(text))


def clean_markdown(source: str) -> str:
    """Markdown made inert: its HTML as the page renders it, cleaned, kept as one HTML block;
    the text itself, escaped, where the page would still find something to run in that."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    rendered = clean_html(markdown2html_mistune(source))
    block = "<div>\n" + re.sub(r"\n[ \t]*(?=\n)", "", rendered).strip() + "\n</div>"
    if is_inert(markdown2html_mistune(block)):
        return block
    return "<pre>" + html.escape(strip_tex(source)) + "</pre>"


def clean_latex(text: str) -> str:
    return strip_tex(text)


def clean_metadata(metadata: object) -> dict:
    """An output's metadata reduced to a numeric width and height per image type."""
    kept: dict[str, dict] = {}
    for mime in ("image/png", "image/jpeg", "image/gif"):
        entry = metadata.get(mime) if isinstance(metadata, dict) else None
        if isinstance(entry, dict):
            size = {k: entry[k] for k in ("width", "height") if _size(entry.get(k))}
            if size:
                kept[mime] = size
    return kept


def _size(value: Any) -> bool:   # Any: the exact type() test below (no bool) is one mypy cannot narrow by
    return type(value) in (int, float) and math.isfinite(value) and 0 < value <= 100_000


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.problems: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag not in TAGS:
            self.problems.append(f"<{tag}>")
        for name, value in attrs:
            if not allowed_attribute(tag, name, value or ""):
                self.problems.append(f"<{tag} {name}={value!r}>")

    handle_startendtag = handle_starttag

    def handle_data(self, data: str) -> None:
        if _TEX.search(data):
            self.problems.append(f"TeX {data[:60]!r}")


def problems(page: str) -> list[str]:
    """What in an HTML text the allowlist would not let through (tags, attributes, URLs, TeX)."""
    checker = _Checker()
    checker.feed(page)
    checker.close()
    return checker.problems


def is_inert(page: str) -> bool:
    return not problems(page)
