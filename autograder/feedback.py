"""Keep hidden tests out of what students get back.

nbgrader's `ClearHiddenTests` removes the hidden lines from a test cell's
source, but a failing hidden assertion still leaves a traceback in the cell's
output, and IPython tracebacks quote the lines around the failure. This
preprocessor replaces every error output of a graded test cell with its last
line (`AssertionError: <message>`), which is all a student needs: the
messages the checks raise say what to change without quoting the test.
"""
from nbgrader.preprocessors import NbGraderPreprocessor


class StripTestTracebacks(NbGraderPreprocessor):
    def preprocess_cell(self, cell, resources, index):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        if cell.cell_type == "code" and meta.get("grade") and not meta.get("solution"):
            for out in cell.get("outputs", []):
                if out.get("output_type") == "error":
                    out["traceback"] = [f"{out.get('ename', 'Error')}: {out.get('evalue', '')}"]
        return cell, resources
