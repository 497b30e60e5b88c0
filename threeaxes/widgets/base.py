"""What the three explorers share: controls that redraw on change, a message
line for invalid combinations, and a plot."""
from __future__ import annotations

import html
from typing import Any, Generic, TypeVar

import ipywidgets as widgets
from IPython.display import display
from matplotlib.figure import Figure

from ..cost import MODELS
from ..cost.presets import MOE_MODELS, Model
from ..display import FigureDisplay

_WIDE = {"description_width": "initial"}
_CLUSTERS = [("A100 80GB nodes", "a100-80gb"), ("H100 80GB nodes", "h100-80gb")]
_MODEL_OPTIONS = [(f"{m.name} ({m.n_params / 1e9:.1f}B)", key) for key, m in MODELS.items()]
# mixtures of experts: offered where an ep control can split their experts
_MOE_OPTIONS = [(f"{m.name} ({m.n_params / 1e9:.1f}B, {m.active_params / 1e9:.1f}B active)", key)
                for key, m in MOE_MODELS.items()]
_CP_CHOICES = [1, 2, 4, 8, 16]     # context-parallel degrees the explorers offer
_EP_CHOICES = [1, 2, 4, 8]         # expert-parallel degrees (Mixtral has 8 experts)


def _preset(key: str) -> Model:
    """A dense preset (``MODELS``) or a mixture of experts (``MOE_MODELS``) by key."""
    return MODELS[key] if key in MODELS else MOE_MODELS[key]


Data = TypeVar("Data")    # what an explorer's compute() returns, for its summary() and draw()


class _Explorer(Generic[Data]):
    """Controls, a message line and a plot; subclasses give compute/draw/summary."""

    title = ""

    def __init__(self, controls: dict[str, Any], rows: list[Any], initial: dict[str, Any]) -> None:
        self.controls = controls
        self.message = widgets.HTML()
        self.output = widgets.Output()
        self.data: Data | None = None          # what compute() returned last (None when invalid)
        self.error: str | None = None         # the message shown instead, when invalid
        self.figure: Figure | None = None        # the matplotlib Figure drawn last
        self._hold = False
        self.widget = widgets.VBox([widgets.HTML(f"<b>{self.title}</b>"), *rows,
                                    self.message, *self._extra_views(), self.output])
        for control in controls.values():
            control.observe(self._on_change, names="value")
        unknown = set(initial) - set(controls)
        if unknown:
            raise ValueError(f"unknown controls {sorted(unknown)}; choose from {sorted(controls)}")
        self.set(**initial)

    def _extra_views(self) -> list[Any]:
        return []

    def _on_change(self, change: dict[str, Any]) -> None:
        if not self._hold:
            self.update()

    def set(self, **values: Any) -> None:
        """Move several controls, then recompute and redraw once."""
        self._hold = True
        try:
            for name, value in values.items():
                self.controls[name].value = value
        finally:
            self._hold = False
        self.update()

    def values(self) -> dict[str, Any]:
        return {name: control.value for name, control in self.controls.items()}

    # what each explorer defines
    def compute(self) -> Data:
        raise NotImplementedError

    def summary(self, data: Data) -> str:
        raise NotImplementedError

    def draw(self, data: Data) -> Figure:
        raise NotImplementedError

    def update(self) -> None:
        try:
            data = self.compute()
        except ValueError as exc:
            # an invalid combination: say what to change, draw nothing
            self.data, self.error, self.figure = None, str(exc), None
            self.message.value = (f'<div style="color:#a0302a">{html.escape(str(exc))}</div>')
            self.output.clear_output()
            self._clear_extra()
            return
        self.data, self.error = data, None
        self.message.value = self.summary(data)
        self.figure = self.draw(data)
        self.output.clear_output(wait=True)
        with self.output:
            display(FigureDisplay(self.figure))

    def _clear_extra(self) -> None:
        pass

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        return self.widget._repr_mimebundle_(**kwargs)
