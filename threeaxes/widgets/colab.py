"""Colab draws ipywidgets 8 (every explorer's sliders) only through its custom widget
manager; without it a widget shows as plain text. Importing `threeaxes.widgets` in a
Colab kernel turns the manager on (the call is safe to repeat), so a student never has
to; anywhere else this does nothing."""
from __future__ import annotations

import sys


def enable_colab_widgets() -> bool:
    """True if this is a Colab kernel and its custom widget manager is now on."""
    if "google.colab" not in sys.modules:
        return False
    try:
        from google.colab import output
        output.enable_custom_widget_manager()
    except (ImportError, AttributeError):   # an older or newer Colab without it: widgets as they are
        return False
    return True
