"""The practice set's logic: the cheatsheet's tree walked on numbers (checked against
the 16N rule worked by hand and against the seed's answers for scenarios a-d), the
self-check answers, the scenario judge, and the printable flashcards and cheatsheet."""
import re

import matplotlib

matplotlib.use("Agg")   # headless; the library itself never picks a backend

import pytest

from threeaxes.cost import GB, get_cluster, get_model, plan, transformer_params
from threeaxes.cost.decide import model_of_size, simplest_fit, walk_tree
from threeaxes.practice import BEYOND_DROPS, SCENARIOS, long_case_plans, pick, reveal_scenario, scenario_walk
from threeaxes.practice_cards import CARDS
from threeaxes.practice_checks import check, reveal
from threeaxes.widgets import print_cheatsheet, print_flashcards
from threeaxes.widgets.flashcards import card_figure

A100 = 80e9          # bytes per A100 80GB, the datasheet's (written out, not read back)
BYTES_A_PARAM = 2 + 2 + 12   # ZeRO Section 3.1: fp16 params + fp16 grads + fp32 Adam (K = 12)


def _pdf_pages(path) -> int:
    """Page objects in a PDF, counted in its bytes (not via matplotlib)."""
    return len(re.findall(rb"/Type\s*/Page\b", path.read_bytes()))


# ----------------------------------------------------------- the tree, a-d ----

# the seed's model answers (practice set, Part A) as tree ends
SEED = {"a": "dp", "b": "tp", "c": "3d", "d": "fsdp"}


@pytest.mark.parametrize("key", sorted(SEED))
def test_the_tree_reaches_the_seeds_answer(key):
    walk = scenario_walk(key)
    assert walk.scheme == SEED[key] == SCENARIOS[key].seed_scheme, walk.path
    assert walk.result.fits and walk.verdict.feasible


def test_scenario_a_fits_one_gpu_by_the_16n_rule():
    walk = scenario_walk("a")
    n = walk.model.n_params
    assert BYTES_A_PARAM * n < A100                      # about 15 GB of 80
    (one_gpu,) = walk.decisions
    assert one_gpu.answer and f"{BYTES_A_PARAM * n / GB:,.1f} GB" in one_gpu.numbers
    assert (walk.config["dp"], walk.config["tp"], walk.config["pp"]) == (8, 1, 1)
    assert walk.path == "one GPU yes -> dp"


def test_scenario_b_needs_the_node_and_the_smallest_tp_that_holds_the_states():
    walk = scenario_walk("b")
    n = walk.model.n_params
    assert BYTES_A_PARAM * n > A100 and BYTES_A_PARAM * n / 8 <= A100   # not one GPU; one node
    assert BYTES_A_PARAM * n / 4 > A100                  # tp=4 is not enough for the states
    assert walk.config["tp"] == 8 and walk.config["dp"] * walk.config["tp"] == 8
    assert [d.answer for d in walk.decisions] == [False, True, True]
    assert walk.path == "one GPU no -> split layers yes -> one node yes -> tp"


def test_scenario_c_goes_3d_with_tp_filling_the_node():
    walk = scenario_walk("c")
    n = walk.model.n_params
    assert BYTES_A_PARAM * n / 8 > A100                  # not even one node
    c = walk.config
    assert c["tp"] == 8 and c["pp"] > 1 and c["dp"] * c["tp"] * c["pp"] == 64
    # the smallest pp: one stage fewer (the next divisor down) does not fit in any plain setting
    smaller = max(p for p in range(1, c["pp"]) if 64 % (8 * p) == 0 and walk.model.n_layers % p == 0)
    config, _ = simplest_fit(walk.model, walk.cluster, 512, dp=64 // (8 * smaller), tp=8,
                             pp=smaller, scheme="3d")
    assert config is None


def test_scenario_d_shards_all_sixteen_bytes_over_sixteen_ranks():
    walk = scenario_walk("d")
    n = walk.model.n_params
    assert walk.config["zero_stage"] == 3 and (walk.config["tp"], walk.config["pp"]) == (1, 1)
    assert walk.result.memory.params + walk.result.memory.grads + walk.result.memory.optimizer \
        == pytest.approx(BYTES_A_PARAM * n / 16)
    assert f"16N / 16 = {BYTES_A_PARAM * n / 16 / GB:.1f} GB each" in walk.decisions[1].numbers


def test_simplest_fit_takes_the_plainest_setting_that_fits():
    model, cluster = get_model("13B"), get_cluster("a100-80gb", n_gpus=16)
    # at its 4k context, memory-efficient attention (the planner's default) needs no
    # recomputation; attention that stored its scores would have needed it
    config, result = simplest_fit(model, cluster, 512, dp=16, tp=1, pp=1, scheme="fsdp")
    assert result.fits and config["recompute"] == "none"
    assert not plan(model, cluster, 512, **config, flash_attention=False).fits
    # at 16k tokens even the linear 34 sbh per layer overflows: the walk adds recomputation
    config, result = simplest_fit(model, cluster, 128, dp=16, tp=1, pp=1, scheme="fsdp",
                                  seq_len=16384)
    assert result.fits and config["recompute"] != "none"
    plainer = plan(model, cluster, 128, 16384, **{**config, "recompute": "none"})
    assert not plainer.fits             # no recomputation would not fit: the walk had to add it


def test_llama_33b_has_52_heads_so_tp_cannot_reach_8_and_the_tree_pipelines():
    model = get_model("30B")
    walk = walk_tree(model, get_cluster("a100-80gb", n_gpus=8), 512)
    assert model.n_heads == 52 and 52 % 8
    assert BYTES_A_PARAM * model.n_params / 8 <= A100 < BYTES_A_PARAM * model.n_params / 4
    assert walk.scheme == "3d" and (walk.config["tp"], walk.config["pp"]) == (4, 2)
    assert walk.decisions[-1].question.startswith("tp:") and not walk.decisions[-1].answer


def test_nothing_fits_says_add_gpus():
    walk = walk_tree(model_of_size(2000), get_cluster("a100-80gb", n_gpus=8), 512)
    assert walk.scheme is None and walk.result is None and "add GPUs" in walk.message


def test_model_of_size_is_near_the_size_asked_and_counts_like_transformer_params():
    for billions in (1, 13, 30, 200):
        m = model_of_size(billions)
        assert abs(m.n_params / (billions * 1e9) - 1) < 0.1, m
        assert m.d_model % 128 == 0 and m.n_heads == m.d_model // 128
        assert m.n_params == int(transformer_params(m.n_layers, m.d_model, 51200, 2048,
                                                    n_heads=m.n_heads))
    with pytest.raises(ValueError, match="must be > 0"):
        model_of_size(0)


# -------------------------------------------------------- self-checks, pick ----

@pytest.mark.parametrize("name, right, wrong", [
    ("q1", 5.0, 80.0),            # 80 GB / 16 bytes = 5 billion parameters
    ("q2", "NVLink", "infiniband"),
    ("q3", 3 / 11, 3 / 8),        # (p-1)/(m+p-1) with p=4, m=8; 3/8 is the overhead
    ("q4", 13.0, 208.0),          # 16 x 13e9 / 16 ranks, in GB
    ("q5", "tp inside, pp across", "pp inside, tp across"),
    ("q6", 2, 16),                # 64 / (8 x 4)
    ("q7", 112.0, 28.0),          # 16 x 7e9 bytes; 28 GB would be fp32 weights alone
    ("q8", "CP", "pp"),           # the activations overflow: split the sequence (below, by hand)
])
def test_self_checks_accept_the_hand_answer_and_name_the_slip(name, right, wrong, capsys):
    assert check(name, right) is True
    assert capsys.readouterr().out.strip() == f"{name}: right."
    assert check(name, wrong) is False
    assert "not yet" in capsys.readouterr().out
    assert check(name, None) is False
    assert "not answered yet" in capsys.readouterr().out


def test_self_check_rejects_answers_of_the_wrong_kind():
    with pytest.raises(ValueError, match="answer with a number"):
        check("q3", "0.27")
    with pytest.raises(ValueError, match="answer with one of"):
        check("q2", "token ring")
    with pytest.raises(ValueError, match="choose one of"):
        check("q9", 1)
    with pytest.raises(ValueError, match="answer with one of"):
        check("q8", "sequence")


# Each slip's value, worked by hand from the question (80 GB = 80e9 bytes, 16 bytes a parameter
# = 2 fp16 weights + 2 fp16 gradients + 12 Adam fp32), and a word of the hint it must get.
SLIPS = {
    "q1": [(40, "2 bytes"), (20, "4 bytes"), (80 / 12, "12 bytes"), (10, "8 bytes"), (5e9, "billions"),
           (85.899 / 16, "GiB")],
    "q2": [("infiniband", "infiniband is not"), ("roce", "roce is not"), ("ethernet", "ethernet is not"),
           ("pcie", "pcie is not"), ("any", "the link decides")],
    "q3": [(0.375, "overhead"), (1 / 3, "p/(m+p)"), (0.25, "(p-1)/(m+p) puts"), (0.125, "1/m"),
           (27.27, "percentage")],
    "q4": [(208, "nothing was divided"), (13 * (4 + 12 / 16), "ZeRO-1"), (13 * (2 + 14 / 16), "ZeRO-2"),
           (26, "one node"), (12.107, "GiB")],
    "q5": [("pp inside, tp across", "swapped"), ("both inside", "cannot hold"),
           ("both across", "slow fabric"), ("either way", "placement matters")],
    "q6": [(8, "leaves out the pipeline"), (16, "leaves out tensor"), (32, "one replica needs"),
           (64 / 12, "do not add"), (52, "multiply")],
    "q7": [(14, "2 bytes"), (28, "4 bytes"), (84, "12 bytes"), (56, "8 bytes"), (104.3, "GiB")],
    "q8": [("ep", "dense"), ("pp", "1F1B"), ("tp", "fills the node"), ("dp", "split the batch")],
}


@pytest.mark.parametrize("name", sorted(SLIPS))
def test_each_catalogued_slip_gets_the_hint_that_answers_it(name, capsys):
    hints = []
    for answer, word in SLIPS[name]:
        assert check(name, answer) is False
        said = capsys.readouterr().out
        assert word in said, (answer, said)
        hints.append(said)
    assert len(set(hints)) == len(hints), "two slips got the same hint"
    assert len(hints) >= (4 if name in ("q5", "q8") else 5)


def test_pick_judges_fit_and_names_the_bottleneck(capsys):
    text = pick("b", "dp", dict(dp=8, tp=1, pp=1))
    assert "not feasible" in text and "GB per GPU" in text and "differs from" in text
    text = pick("b", "tp", dict(dp=1, tp=8, pp=1))
    assert text.startswith("scenario b") and "fits (" in text and "agrees with" in text
    assert "bottleneck here: memory" in text
    assert "refuses TP and PP" in pick("d", "tp", dict(dp=4, tp=4, pp=1))
    assert "not answered yet" in pick("a", None, None)
    with pytest.raises(ValueError, match="choose scheme in"):
        pick("a", "zero", dict(dp=8))
    with pytest.raises(ValueError, match="must be a dict"):
        pick("a", "dp", (8, 1, 1))
    with pytest.raises(ValueError, match="choose one of"):
        pick("e", "dp", dict(dp=8))


# ----------------------------------------------------------------- print ----

def test_flashcards_print_one_card_a_page(tmp_path):
    path = tmp_path / "cards.pdf"
    assert print_flashcards(path) == 9
    assert path.read_bytes().startswith(b"%PDF") and _pdf_pages(path) == 9
    assert len(CARDS) == 9 and len({q for q, _ in CARDS}) == 9
    two = tmp_path / "two.pdf"
    print_flashcards(two, [("q one", "a one"), ("q two", "a two")])
    assert _pdf_pages(two) == 2


def test_a_printed_card_carries_its_question_and_answer():
    question, answer = CARDS[4]
    fig = card_figure(question, answer, 5, 9)
    words = " ".join(t.get_text().replace("\n", " ") for t in fig.texts)
    assert question in words and answer in words and "5 of 9" in words


def test_print_rejects_a_bad_deck(tmp_path):
    with pytest.raises(ValueError, match=r"\(question, answer\) pair"):
        print_flashcards(tmp_path / "x.pdf", [("only a question",)])
    with pytest.raises(ValueError, match="at least one"):
        print_flashcards(tmp_path / "x.pdf", [])


def test_cheatsheet_prints_on_one_page(tmp_path):
    path = tmp_path / "cheatsheet.pdf"
    assert print_cheatsheet(path) == 1
    assert _pdf_pages(path) == 1


def test_reveal_folds_the_computed_answer_under_a_summary():
    shown = reveal("q4").data
    assert shown.startswith("<details><summary>Show the answer</summary>")
    assert "<b>13</b>" in shown                     # 16 x 13e9 / 16 ranks = 13e9 bytes
    with pytest.raises(ValueError, match="choose one of"):
        reveal("q0")


@pytest.mark.parametrize("key", sorted(SEED))
def test_reveal_scenario_shows_the_tree_and_the_planners_verdict(key):
    shown = reveal_scenario(key).data
    walk = scenario_walk(key)
    assert shown.startswith(f"<details><summary>Show the answer for {key}</summary>")
    assert shown.count("<li>") == len(walk.decisions) and walk.result.label in shown
    assert "the best found" in shown


def test_a_team_without_tp_or_pp_and_too_few_gpus_is_told_to_add_gpus():
    walk = walk_tree(model_of_size(200), get_cluster("a100-80gb", n_gpus=8), 512,
                     split_layers=False)
    assert walk.scheme is None and walk.message.startswith("ZeRO-3 over every GPU")
    assert "add GPUs" in walk.message


# ------------------------------------------------- beyond the three axes ----

def test_q8s_case_overflows_by_its_activations_and_only_cp_divides_them():
    # Llama-2 70B (80 layers, h = 8192, 64 heads) at s = 65536, b = 1, tp = 8 with sequence
    # parallelism, memory-efficient attention: 34 s b h / t bytes a layer (Korthikanti et al.
    # 2022, Table 2), 80 layers, one micro-batch in flight (pp = 1), plus Section 4.3's
    # extras: the embedding's dropout mask, s b h / t bytes, and (the only stage holds the
    # output layer) 4 s b h / t (1 + v / h) for the final norm, output and fp32 logits
    plans = long_case_plans()
    start = plans["dp"]
    s, h, t, v = 65536, 8192, 8, 32000
    assert start.memory.activations == pytest.approx(
        80 * 34 * s * h / t + s * h / t + 4 * s * h / t * (1 + v / h))
    assert start.memory.activations > 80e9 and not start.fits
    assert (start.memory.total - start.memory.activations) < 80e9      # the states fit
    # cp = 8: each rank keeps s/8 of the tokens, the states stay (ZeRO-1 over dp x cp = 8)
    assert plans["cp"].memory.activations == pytest.approx(start.memory.activations / 8)
    assert plans["cp"].memory.optimizer == pytest.approx(start.memory.optimizer)
    assert plans["cp"].fits
    # pp = 8 under 1F1B: stage 0 holds 8 micro-batches of 10 layers, the same 80 layer-batches,
    # and a dropout mask for each of the 8 (no output layer on stage 0)
    assert plans["pp"].memory.activations == pytest.approx(
        8 * 10 * 34 * s * h / t + 8 * s * h / t)
    assert not plans["pp"].fits
    # tp past the node and ep on a dense model are refused, each saying why
    assert "tp=64" in plans["tp"] and "needs a mixture-of-experts model" in plans["ep"]
    assert check("q8", "cp") is True


def test_the_practice_set_names_the_optional_drops_after_drop_14():
    from threeaxes.course import COURSE_MAP

    folders = {d.folder: d.number for d in COURSE_MAP}
    assert [name for name, _ in BEYOND_DROPS] == ["drop15-context-parallel",
                                                  "drop16-expert-parallel"]
    assert [folders[name] for name, _ in BEYOND_DROPS] == [15, 16]
    assert "drop15-context-parallel" in _practice_notebook_text()
    assert "BEYOND_DROPS" in _practice_notebook_text()


def _practice_notebook_text() -> str:
    import json
    from pathlib import Path

    nb = json.loads((Path(__file__).resolve().parents[2] / "notebooks" / "practice.ipynb").read_text())
    return "\n".join("".join(c["source"]) for c in nb["cells"])
