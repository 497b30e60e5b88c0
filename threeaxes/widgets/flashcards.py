"""Flashcards: a deck to flip on screen and the same cards printed one per page.

    deck = FlashcardDeck()          # the practice set's nine cards by default
    deck                            # click the card to flip; previous / next / shuffle;
                                    # "I knew it" counts the cards marked as known
    print_flashcards("cards.pdf")   # one card per page (matplotlib's PdfPages)
"""
from __future__ import annotations

import html
import os
import random
import textwrap
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import ipywidgets as widgets
from matplotlib.backends.backend_pdf import PdfPages
from matplotlib.figure import Figure

if TYPE_CHECKING:
    from matplotlib.lines import Line2D

__all__ = ["FlashcardDeck", "print_flashcards", "card_figure"]

_CARD_STYLE = ("border:1px solid #888;border-radius:8px;padding:18px;min-height:110px;"
               "font-size:15px;background:{bg}")


def _default_cards() -> tuple[tuple[str, str], ...]:
    from ..practice_cards import CARDS
    return CARDS


def _check_cards(cards: Iterable[tuple[str, str]]) -> tuple:
    cards = tuple(cards)
    if not cards:
        raise ValueError("a deck needs at least one (question, answer) card")
    for i, card in enumerate(cards):
        if len(card) != 2 or not all(isinstance(side, str) and side.strip() for side in card):
            raise ValueError(f"card {i} is {card!r}; give each card as a (question, answer) "
                             "pair of non-empty strings")
    return cards


class FlashcardDeck:
    """Click the card (a button) to flip it; previous, next, shuffle; mark cards as known."""

    def __init__(self, cards: Iterable[tuple[str, str]] | None = None, seed: int | None = None) -> None:
        self.cards = _check_cards(_default_cards() if cards is None else cards)
        self.order = list(range(len(self.cards)))
        self.position = 0           # index into order
        self.showing_answer = False
        self.known: set = set()     # card indices (into cards) marked as known
        self._random = random.Random(seed)
        self.card = widgets.Button(layout=widgets.Layout(width="100%", height="auto"),
                                   tooltip="click to flip")
        self.face = widgets.HTML()
        self.counter = widgets.HTML()
        self.previous_button = widgets.Button(description="previous", icon="arrow-left")
        self.next_button = widgets.Button(description="next", icon="arrow-right")
        self.shuffle_button = widgets.Button(description="shuffle", icon="random")
        self.known_box = widgets.Checkbox(False, description="I knew it")
        self.card.description = "flip"
        self.card.on_click(lambda _: self.flip())
        self.previous_button.on_click(lambda _: self.move(-1))
        self.next_button.on_click(lambda _: self.move(+1))
        self.shuffle_button.on_click(lambda _: self.shuffle())
        self.known_box.observe(self._on_known, names="value")
        self.widget = widgets.VBox([
            widgets.HTML("<b>Flashcards</b>"), self.face, self.card,
            widgets.HBox([self.previous_button, self.next_button, self.shuffle_button,
                          self.known_box]),
            self.counter])
        self._render()

    # ---- state changes (what the buttons do)
    @property
    def current(self) -> int:
        """Index (into cards) of the card on screen."""
        return self.order[self.position]

    def flip(self) -> None:
        self.showing_answer = not self.showing_answer
        self._render()

    def move(self, step: int) -> None:
        self.position = (self.position + step) % len(self.order)
        self.showing_answer = False
        self._render()

    def shuffle(self) -> None:
        self._random.shuffle(self.order)
        self.position = 0
        self.showing_answer = False
        self._render()

    def _on_known(self, change: dict) -> None:
        if change["new"]:
            self.known.add(self.current)
        else:
            self.known.discard(self.current)
        self._render()

    # ---- drawing
    def _render(self) -> None:
        question, answer = self.cards[self.current]
        side, text, bg = (("answer", answer, "#eef6ee") if self.showing_answer
                          else ("question", question, "#f4f4fb"))
        self.face.value = (f'<div style="{_CARD_STYLE.format(bg=bg)}"><small>{side}</small>'
                           f"<br>{html.escape(text)}</div>")
        self.card.description = "show the question" if self.showing_answer else "show the answer"
        self.known_box.unobserve(self._on_known, names="value")
        self.known_box.value = self.current in self.known
        self.known_box.observe(self._on_known, names="value")
        self.counter.value = (f"card {self.position + 1} of {len(self.cards)}; "
                              f"known: <b>{len(self.known)}</b> of {len(self.cards)}")

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)


def card_figure(question: str, answer: str, number: int, total: int) -> Figure:
    """One card as a letter-sized page: the question above, the answer below a fold line."""
    fig = Figure(figsize=(8.5, 11))
    fig.text(0.5, 0.96, f"Three Axes flashcards: {number} of {total}", ha="center", fontsize=10,
             color="#666")
    fig.text(0.08, 0.86, "Q", fontsize=28, weight="bold", color="#4c72b0")
    fig.text(0.16, 0.86, "\n".join(textwrap.wrap(question, 44)), fontsize=18, va="top")
    fig.add_artist(_fold_line(fig))
    fig.text(0.5, 0.515, "fold here", ha="center", fontsize=8, color="#999")
    fig.text(0.08, 0.44, "A", fontsize=28, weight="bold", color="#55a868")
    fig.text(0.16, 0.44, "\n".join(textwrap.wrap(answer, 52)), fontsize=15, va="top")
    return fig


def _fold_line(fig: Figure) -> Line2D:
    from matplotlib.lines import Line2D
    return Line2D([0.05, 0.95], [0.5, 0.5], transform=fig.transFigure, linestyle="--",
                  color="#999")


def print_flashcards(path: str | os.PathLike, cards: Iterable[tuple[str, str]] | None = None) -> int:
    """Write the cards to a PDF at `path`, one card per page; returns the page count."""
    cards = _check_cards(_default_cards() if cards is None else cards)
    with PdfPages(path) as pdf:
        for i, (question, answer) in enumerate(cards, start=1):
            pdf.savefig(card_figure(question, answer, i, len(cards)))
        pdf.infodict()["Title"] = "Three Axes flashcards"
    return len(cards)
