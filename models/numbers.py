"""How the lesson commands (and viz's text) print numbers and tables.

A number has fixed decimals, but a nonzero below TINY (1e-4), or below one unit
of the last decimal shown when that is larger, is written in scientific
notation, so that a tiny value never reads as zero: `is_tiny` and `fixed` are
that rule, the one copy of it. A table labels its rows and columns
and keeps CJK labels aligned.
"""
import math
import unicodedata

import numpy as np


TINY = 1e-4  # a nonzero value smaller than this is written 1.23e-05


def is_tiny(values, decimals=6):
    """Whether each value is nonzero and smaller in size than TINY, or than 10^−decimals, which `decimals` places
    would show as 0 (a number, or elementwise for an array)."""
    return (values != 0) & (np.abs(values) < max(TINY, 10.0 ** -decimals))


def fixed(value, decimals=6):
    """`decimals` places; a tiny value (is_tiny) as 1.23e-05; exact zero as 0.000000 (never -0.000000); -inf as -inf."""
    value = float(value)
    if math.isinf(value):
        return "-inf" if value < 0 else "inf"
    if value == 0:
        return f"{0.0:.{decimals}f}"
    if is_tiny(value, decimals):
        return f"{value:.2e}"
    return f"{value:.{decimals}f}"


def text_width(text):
    """Columns a string takes in a terminal: CJK characters take two."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def section(source, title):
    """A heading: the lesson's or article's section (in its words), then what follows, ruled to a common width."""
    heading = f"{source} · {title}"
    print(f"\n── {heading} " + "─" * max(4, 76 - text_width(heading)))


def _pad(text, width, right=False):
    gap = " " * max(0, width - text_width(text))
    return gap + text if right else text + gap


def format_table(values, rows, cols):
    """A labelled table of numbers (a vector is one row)."""
    values = np.atleast_2d(values)
    cells = [[fixed(v) for v in row] for row in values]
    row_width = max(text_width(r) for r in rows)
    col_width = max([text_width(c) for c in cols] + [len(s) for row in cells for s in row])
    lines = ["  " + _pad("", row_width) + "".join("  " + _pad(c, col_width, right=True) for c in cols)]
    for label, row in zip(rows, cells):
        lines.append("  " + _pad(label, row_width) + "".join("  " + _pad(s, col_width, right=True) for s in row))
    return "\n".join(lines)
