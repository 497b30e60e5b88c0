"""The practice set's widgets, driven like a student would: buttons clicked, controls moved,
and what they show checked."""
import html

import matplotlib

matplotlib.use("Agg")   # headless; the library itself never picks a backend

import pytest

from threeaxes.widgets import DecisionTreeExplorer, FlashcardDeck
from threeaxes.widgets.decision_tree import TAKEN

DECK = [("q0", "a0"), ("q1", "a1"), ("q2", "a2"), ("q3", "a3")]


def _shown(deck):
    return html.unescape(deck.face.value)


# ------------------------------------------------------------- flashcards ----

def test_click_the_card_to_flip_it_and_back():
    deck = FlashcardDeck(DECK)
    assert "q0" in _shown(deck) and "question" in _shown(deck)
    deck.card.click()
    assert "a0" in _shown(deck) and "answer" in _shown(deck)
    assert deck.card.description == "show the question"
    deck.card.click()
    assert "q0" in _shown(deck)


def test_next_and_previous_wrap_and_show_the_question_side():
    deck = FlashcardDeck(DECK)
    deck.card.click()
    deck.next_button.click()
    assert "q1" in _shown(deck) and deck.counter.value.startswith("card 2 of 4")
    deck.previous_button.click()
    deck.previous_button.click()
    assert "q3" in _shown(deck) and deck.counter.value.startswith("card 4 of 4")


def test_known_count_follows_the_checkbox_and_is_remembered_per_card():
    deck = FlashcardDeck(DECK)
    deck.known_box.value = True
    deck.next_button.click()
    assert deck.known_box.value is False                 # card 2 not marked yet
    deck.known_box.value = True
    assert "known: <b>2</b> of 4" in deck.counter.value
    deck.previous_button.click()
    assert deck.known_box.value is True                  # card 1 remembered
    deck.known_box.value = False
    assert "known: <b>1</b> of 4" in deck.counter.value and deck.known == {1}


def test_shuffle_is_a_permutation_and_starts_over_on_a_question():
    deck = FlashcardDeck(DECK, seed=3)
    deck.next_button.click()
    deck.card.click()
    deck.shuffle_button.click()
    assert sorted(deck.order) == [0, 1, 2, 3] and deck.position == 0
    assert f"q{deck.order[0]}" in _shown(deck) and not deck.showing_answer
    orders = {tuple(deck.order)}
    for _ in range(5):
        deck.shuffle_button.click()
        orders.add(tuple(deck.order))
    assert len(orders) > 1


def test_the_default_deck_is_the_nine_practice_cards():
    deck = FlashcardDeck()
    assert len(deck.cards) == 9 and deck.counter.value.startswith("card 1 of 9")
    assert "known: <b>0</b> of 9" in deck.counter.value


def test_a_bad_deck_says_how_to_give_cards():
    with pytest.raises(ValueError, match=r"\(question, answer\) pair"):
        FlashcardDeck([("q", "")])


# ---------------------------------------------------------- decision tree ----

def _taken_leaf(figure):
    """Text of the leaf box drawn with the taken colour (bold)."""
    return [t.get_text() for t in figure.axes[0].texts
            if t.get_bbox_patch() is not None and t.get_weight() == "bold"]


def test_tree_default_is_the_30b_node_and_shows_each_decision():
    tree = DecisionTreeExplorer()
    assert tree.data.scheme == "tp" and tree.error is None
    assert tree.path.value.count("<li>") == 3
    assert "469.2 GB" in html.unescape(tree.path.value)      # 16 x 29.32e9 bytes
    assert _taken_leaf(tree.figure) == ["TP inside the node\n+ DP across nodes"]
    assert tree.data.result.label in " ".join(t.get_text() for t in tree.figure.axes[0].texts)


def test_moving_controls_walks_other_branches():
    tree = DecisionTreeExplorer()
    tree.set(billions=200, nodes=8)
    assert tree.data.scheme == "3d" and tree.data.cluster.n_gpus == 64
    assert _taken_leaf(tree.figure) == ["3D: TP inside nodes,\nPP across nodes, DP on top"]
    tree.controls["billions"].value = 1                   # one control moved: redraws
    assert tree.data.scheme == "dp" and tree.path.value.count("<li>") == 1
    tree.set(billions=13, nodes=2, split_layers=False)
    assert tree.data.scheme == "fsdp" and tree.data.config["zero_stage"] == 3
    assert "FSDP / ZeRO-3 over every GPU" in tree.message.value


def test_gpu_memory_moves_the_answer():
    tree = DecisionTreeExplorer(billions=1.2, nodes=1, gpu_gb=24)
    states = 16 * tree.data.model.n_params               # 2 + 2 + 12 bytes a parameter
    assert 16e9 < states <= 24e9 and tree.data.scheme == "dp"
    tree.controls["gpu_gb"].value = 16                    # the states no longer fit one GPU
    assert tree.data.scheme != "dp" and not tree.data.decisions[0].answer
    assert "> 16.0 GB per GPU" in tree.data.decisions[0].numbers


def test_a_preset_disables_the_size_box():
    tree = DecisionTreeExplorer(model="llama-30b")
    assert tree.controls["billions"].disabled
    assert tree.data.model.n_heads == 52 and tree.data.scheme == "3d"
    assert "does a tp in [1, 2, 4]" in html.unescape(tree.path.value)
    tree.controls["model"].value = "size"
    assert not tree.controls["billions"].disabled


def test_nothing_fits_shows_what_to_change_instead_of_a_plot():
    tree = DecisionTreeExplorer(billions=2000, nodes=1)
    assert tree.data is None and tree.figure is None and "add GPUs" in tree.message.value
    assert tree.path.value == ""


def test_a_batch_that_dp_does_not_split_is_a_message():
    tree = DecisionTreeExplorer(billions=1, nodes=3, global_batch=64)   # 24 GPUs, 64 sequences
    assert tree.data is None and "multiple of 24" in tree.message.value


def test_tree_draws_the_taken_edges_in_the_taken_colour():
    from matplotlib.colors import to_hex
    tree = DecisionTreeExplorer(billions=200, nodes=8)
    arrows = [a for a in tree.figure.axes[0].texts if getattr(a, "arrow_patch", None) is not None]
    taken = [a for a in arrows if to_hex(a.arrow_patch.get_edgecolor()) == TAKEN]
    assert len(arrows) == 7 and len(taken) == 3        # one GPU no, split yes, one node no


def test_both_widgets_display_as_widgets_in_a_notebook():
    for shown in (FlashcardDeck(DECK), DecisionTreeExplorer()):
        bundle = shown._repr_mimebundle_()
        assert "application/vnd.jupyter.widget-view+json" in bundle
