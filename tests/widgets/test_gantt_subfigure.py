"""gantt on the axes of a SubFigure: the Figure's size decides which labels fit, and a
SubFigure has none of its own, so it is refused saying what to pass (it used to fail
inside the drawing with an AttributeError)."""
import pytest
from matplotlib.figure import Figure

from threeaxes.plots import gantt
from threeaxes.trace import Event


def test_gantt_on_a_subfigures_axes_says_what_to_pass():
    events = [Event(rank=0, op="forward", kind="compute", start=0.0, end=1.0)]
    ax = Figure().subfigures(1, 2)[0].subplots()
    with pytest.raises(TypeError, match="not of a SubFigure"):
        gantt(events, ax=ax)
    assert isinstance(gantt(events, ax=Figure().subplots()), Figure)    # a Figure's axes still draw
