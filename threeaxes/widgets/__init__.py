"""Calculators students move: the bubble, memory and configuration explorers.

Each explorer is a class with a pure step, ``compute()``, that turns the
controls' values into the data to draw (tests check it without rendering),
and a drawing step that renders it with matplotlib into an
``ipywidgets.Output``. A combination that breaks a constraint shows a plain
message in the widget, saying what to change, never a traceback.

    BubbleExplorer()   p, m, v, schedule -> bubble fraction, overhead, timeline
    MemoryExplorer()   model, precision, dp/tp/pp (cp, ep), ZeRO, recompute, s, b -> bars
    ConfigExplorer()   model and cluster (cp, ep) -> ranked feasible (dp, tp, pp, ...) table
    FixExplorer()      drop 10: the crashed 13B run's fixes -> memory bars, step time
    LinkExplorer()     drop 11: GPUs per node, inter-node bandwidth -> step time by term
    BubbleMovesExplorer()  drop 12: tp, pp, v, ZeRO, ... -> m, bubble, memory, step time
    DecisionTreeExplorer(), FlashcardDeck()   the practice set: the cheatsheet's tree, the cards

Display one by making it the last expression of a cell, or ``.widget``.
``explorer.set(name=value, ...)`` moves several controls and redraws once.
"""
from .bubble import BubbleData, BubbleExplorer
from .bubble_moves import BubbleMovesExplorer
from .colab import enable_colab_widgets
from .config import ConfigData, ConfigExplorer
from .decision_tree import DecisionTreeExplorer, print_cheatsheet
from .fix import FixExplorer
from .flashcards import FlashcardDeck, print_flashcards
from .links import LinkExplorer
from .memory import MemoryData, MemoryExplorer

enable_colab_widgets()   # in Colab only: its widget manager draws ipywidgets 8

__all__ = ["BubbleExplorer", "MemoryExplorer", "ConfigExplorer", "BubbleData",
           "MemoryData", "ConfigData", "DecisionTreeExplorer", "print_cheatsheet",
           "FlashcardDeck", "print_flashcards", "FixExplorer", "LinkExplorer",
           "BubbleMovesExplorer"]
