#!/usr/bin/env python3
"""The checks a script test counts: check(name, ok, detail) prints one line, and failed() is how many did not hold
(view_svg.py, view_ranks.py, browser.py). Standard library only."""

_fails = 0


def check(name, ok, detail=""):
    global _fails
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        _fails += 1


def failed():
    return _fails
