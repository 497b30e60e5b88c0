"""Every core stands on what came before: a term of the glossary (threeaxes.glossary) is defined
in the core of the drop it names, and no core uses it before that, neither an earlier drop's
core nor an earlier cell of the defining core. The glossary page shows every term.

Cores are read as the course reads them (threeaxes.sections: the "Going deeper" sections are
left out), their prose only (markdown cells, less their headings): code and its comments may
name an API freely, and a heading may announce a term the prose under it defines.
"""
import json
import re
from pathlib import Path

import pytest

from threeaxes import glossary
from threeaxes.sections import split

ROOT = Path(__file__).resolve().parents[2]

# Terms whose defining drop has not defined them yet: each names the drop that must.
NOT_YET_DEFINED = {}


def core_prose(number: int) -> list[tuple[int, str]]:
    """(cell index, text) of the markdown cells of drop `number`'s core, headings left out."""
    (folder,) = (ROOT / "source").glob(f"drop{number:02d}-*")
    nb = json.loads((folder / f"{folder.name}.ipynb").read_text())
    # a heading announces a term that the prose under it defines: headings are not uses
    return [(k, re.sub(r"(?m)^\s*#{1,6}\s.*$", "", "".join(c["source"])))
            for k, c in split(nb)[0] if c["cell_type"] == "markdown"]


DROPS = sorted(int(p.name[4:6]) for p in (ROOT / "source").glob("drop[0-9][0-9]-*"))
CORES = {n: core_prose(n) for n in DROPS}


def _param(term):
    reason = NOT_YET_DEFINED.get(term.name)
    marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
    return pytest.param(term, marks=marks, id=term.name)


def _snippet(term, text):
    text = re.sub(r"\s+", " ", text)
    m = next(re.search(p, text) for p in term.patterns if re.search(p, text))
    return text[max(0, m.start() - 40):m.end() + 40].replace("\n", " ")


def problems(term, cores) -> list[str]:
    """What is wrong with `term` in `cores` ({drop: [(cell, prose)]}): no definition in its drop's
    core, or uses before it (in an earlier drop's core, or an earlier cell of its own)."""
    if term.drop not in cores:
        return [f"{term.name!r}: there is no drop {term.drop}"]
    defining = [k for k, text in cores[term.drop] if term.defined(text)]
    if not defining:
        wanted = term.defines or "the term in bold, or italics, or followed by a colon, a parenthesis, is, are or means"
        return [f"{term.name!r}: drop {term.drop}'s core has no definition of it "
                f"(the glossary expects a match of {wanted})"]
    return [f"{term.name!r} (defined in drop {term.drop}, cell {defining[0]}) is used before, in drop {n} "
            f"cell {k}: ...{_snippet(term, text)}..."
            for n in sorted(cores) for k, text in cores[n]
            if (n < term.drop or (n == term.drop and k < defining[0])) and term.used(text)]


@pytest.mark.parametrize("term", [_param(t) for t in glossary.TERMS])
def test_the_defining_core_defines_the_term_and_no_core_uses_it_before(term):
    found = problems(term, CORES)
    assert not found, "; ".join(found)


def test_the_check_names_a_use_before_the_definition_and_a_missing_definition():
    bubble = glossary.BY_NAME["bubble"]
    assert problems(bubble, {4: [(3, "the idle time is the **bubble**")]}) == []
    early = problems(bubble, {2: [(7, "a bubble appears")], 4: [(3, "the **bubble**")]})
    assert len(early) == 1 and "drop 2 cell 7" in early[0]
    same_drop = problems(bubble, {4: [(1, "mind the bubble"), (3, "the **bubble**")]})
    assert len(same_drop) == 1 and "drop 4 cell 1" in same_drop[0]
    assert "has no definition" in problems(bubble, {4: [(3, "the bubble shrinks")]})[0]
    # a term wrapped over two lines of markdown is still found, in bold or not
    assert glossary.BY_NAME["model states (training state)"].used("a model's training\nstate")
    assert glossary.BY_NAME["data parallelism (DP)"].defined("plain **data\nparallelism**;")
    # italics define too, a list's bullets do not
    assert glossary.BY_NAME["key/value heads"].defined("It has 8 *key/value heads*: each")
    assert not glossary.BY_NAME["FSDP"].defined("* ZeRO-3 shards it\n* FSDP does the same\n* more")


def test_the_glossary_knows_what_the_issue_asks_for():
    wanted = {"MFU": 11, "Ψ": 9, "f and g maps": 3, "key/value heads": 14, "gradient accumulation": 10,
              "`plan`": 10, "`search`": 10, "stage": 1, "micro-batch": 4, "bubble": 4, "1F1B": 4,
              "ZeRO stages": 9}
    for name, drop in wanted.items():
        assert glossary.BY_NAME[name].drop == drop, name
    for name in ("reduce-scatter", "model states (training state)", "node", "NVLink", "NVSwitch", "InfiniBand"):
        assert name in glossary.BY_NAME, name


def test_each_term_has_one_sentence_and_patterns_that_find_it():
    for term in glossary.TERMS:
        assert term.sentence.endswith(".") and term.sentence.count(". ") == 0, term.name
        for p in term.patterns:
            re.compile(p)
    names = [t.name for t in glossary.TERMS]
    assert len(names) == len(set(names))


def test_the_term_in_bold_is_a_definition_and_a_mention_is_not():
    term = glossary.BY_NAME["bubble"]
    assert term.defined("that idle time is the **bubble**.")
    assert term.used("the bubble falls") and not term.defined("the bubble falls")


def test_the_glossary_page_shows_every_term_and_the_start_page_links_it():
    nb = json.loads((ROOT / "notebooks" / "glossary.ipynb").read_text())
    (cell,) = [c for c in nb["cells"] if "glossary" in c["metadata"].get("tags", [])]
    assert "".join(cell["source"]) == glossary.markdown(), "run python -m threeaxes.glossary --write"
    start = "".join("".join(c["source"]) for c in
                    json.loads((ROOT / "notebooks" / "00-start-here.ipynb").read_text())["cells"])
    assert "(glossary.ipynb)" in start
