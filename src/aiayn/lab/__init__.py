"""The paper lab: each claim of "Attention Is All You Need" measured, one module per topic.

Every module holds a few pure functions returning numbers and arrays; report.py plots them and
writes the report, and the web page draws the same numbers.
"""
