"""pytest setup for the olmo_kernels tests: puts python/ on the import path (the package is used
from the source tree, built in place) and prints, at the end of the run, our worst error next to
SDPA's (or torch's own op's) on the same inputs, per test group (error_report.py collects them)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [os.path.dirname(HERE), HERE]


def pytest_terminal_summary(terminalreporter):
    import error_report

    for line in error_report.summary():
        terminalreporter.write_line(line)
