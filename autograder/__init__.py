"""The grader and the course's instructor side, in layers (CONTRIBUTING.md has the map):
the course's data here (course, spec, cases, references/), the sandboxed kernel (runtime/),
judging on it (judging/), what nbgrader_config.py names (plugins/), and the commands (apps/:
release, grade, exchange, report, hub, and workspace, what a student's `make lab` runs)."""
