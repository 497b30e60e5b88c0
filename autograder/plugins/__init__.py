"""What nbgrader_config.py names: the judged execute, the feedback preprocessors, the
export's columns, the safe collect.
"""
