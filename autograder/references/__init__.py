"""What the hidden tests compute their expected answers with: the instructor's side.

One module per drop (`dropNN.py`): the reference answers, the mistakes they name,
the cases a hidden test draws at grading time, and the judges of what ranks send
back. None of it is in the package students install (`make student-repo` leaves
this folder out, and a test searches the export for every body here). What a
student's kernel needs stays in `threeaxes.grading`: each drop's scenario
constants, the runners that call the student's function on fresh ranks and send
back raw values, and the visible checks' stored cases (`autograder/cases.py`).
"""
