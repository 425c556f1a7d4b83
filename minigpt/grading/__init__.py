"""The autograder: a pytest plugin (exercises/conftest.py switches it on) that grades the learners' answers
without ever running them in its own process.

    plugin     the pytest face: options, markers, the `answers` fixture, messages, the score and its files
    answers    the grader's side of the workers: one process per exercise, calls with a deadline, kills
    worker     the worker's side: imports the answers and runs the calls it is sent
    warm       imported once by the server the workers are forked from, so each starts warm
    transfer   what crosses between them: calls as pickles, results as plain data only
    watch      what a test can watch next to the answer: optimizer steps, training runs, saved bytes
    messages   one message per failed test
    score      points, grade.json and Gradescope's results.json, the exercise table that caps them
"""
