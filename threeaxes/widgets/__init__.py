"""Calculators students move: the bubble, memory and configuration explorers, each drop's own
(fix, links, bubble moves) and the practice set's tree and cards. Each has a pure step,
``compute()`` (controls' values to the data to draw; tests check it without rendering), and a
drawing step into an ``ipywidgets.Output``; a combination that breaks a rule shows a message
saying what to change, never a traceback. Display one by making it the last expression of a cell, or ``.widget``;
``explorer.set(name=value, ...)`` moves several controls and redraws once."""
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
