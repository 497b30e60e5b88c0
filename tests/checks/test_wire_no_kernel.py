"""Answers read with no kernel behind them (the oracle's decoder): asking anything of the kernel
fails as a KernelGone that says so, never as a TypeError from calling None."""
import pytest

from threeaxes.grading.wire import Answers, KernelGone


def test_asking_answers_with_no_kernel_says_there_is_none():
    answers = Answers(None)
    for ask in (lambda: answers.get(["x"]), lambda: answers.request({"op": "get", "names": ["x"]})):
        with pytest.raises(KernelGone, match="no kernel"):
            ask()
