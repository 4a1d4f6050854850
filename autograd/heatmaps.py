"""Matrices drawn as heatmaps: the one place autograd draws, for gradcheck(picture=) and viz.jacobian.

`figure(rows, title, notes)` lays out rows of `Panel`s, each a matrix drawn
with a diverging colour map centred at 0 (blue below, red above, white at 0;
NaN and ±inf black, off the scale) and its axes labelled, with lines of text
under them; it returns a `Picture`, a matplotlib Figure that Jupyter shows inline and `savefig` writes as PNG,
SVG or PDF. Panels of one `group` share their colour scale, so that two
matrices meant to be equal look equal. `picture_format` and `is_special` are
the rules of where a picture goes (models.io writes by the same `is_special`),
and `picture_bytes` draws it in memory, bytes that a pipe takes too.

matplotlib is imported when a picture is made, not with autograd: the engine
stays free of it, and a gradcheck without `picture=` never loads it. It is
drawn here rather than in viz because autograd must not import viz, and a
hook that viz registers would leave `gradcheck(picture=...)` silently doing
nothing in a program that never imported viz.
"""
import io
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import numpy as np

COLOUR_MAP = "RdBu_r"
NOT_FINITE = "black"  # NaN and ±inf: outside the colour scale, and unlike any colour on it
LABELLED_TICKS = 16  # up to this many rows or columns every index is labelled; beyond, about this many
ANNOTATED = 64  # a matrix of at most this many cells shows each value in its cell
NOTES_FONT = {"family": "DejaVu Sans Mono", "size": 9}  # the lines under the panels
FORMATS = ("png", "svg", "pdf")  # what a picture is written as, named by its file's suffix


@dataclass
class Panel:
    """One matrix to draw: `rows` and `columns` label its axes' indices, `ylabel` and `xlabel` the axes."""

    title: str
    matrix: np.ndarray
    ylabel: str = "row"
    xlabel: str = "column"
    rows: list = None
    columns: list = None
    group: int = 0


def as_matrix(array):
    """An array as the 2-D matrix a heatmap shows: a scalar as 1 × 1, a vector as one row, more axes as
    (all but the last flattened) × (the last)."""
    a = np.asarray(array, dtype=np.float64)
    if a.ndim < 2:
        return a.reshape(1, -1)
    return a.reshape(-1, a.shape[-1])


def array_panel(title, array, group=0):
    """A Panel of an n-d array laid out by as_matrix, its axes named by the array's own: for (B, T, C), rows
    are the indices over axes 0–1 (labelled 'b,t') and columns axis 2."""
    shape = np.shape(array)
    if len(shape) < 2:
        return Panel(title, as_matrix(array), ylabel="", xlabel="index", rows=[""], group=group)
    rows = "axis 0" if len(shape) == 2 else f"axes 0–{len(shape) - 2}"
    return Panel(title, as_matrix(array), ylabel=rows, xlabel=f"axis {len(shape) - 1}",
                 rows=index_labels(shape[:-1]), group=group)


def is_special(path):
    """Whether `path` is there and neither a regular file nor a folder: a device or a pipe, written where it is."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def picture_format(path, who):
    """The format that `path`'s suffix names, one of FORMATS; otherwise an error naming `who`, so that a caller
    can refuse the path before any work, not after it (matplotlib would add .png to a name without a suffix).
    A device or a pipe without a suffix (/dev/null, a FIFO) takes PNG: its name has no format to go by."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{who} must be a file name (a str or pathlib.Path), got {type(path).__name__}; "
                        "e.g. 'mismatch.png'")
    if not Path(path).suffix and is_special(path):
        return "png"
    fmt = Path(path).suffix.lower()[1:]
    if fmt not in FORMATS:
        raise ValueError(f"{who} {str(path)!r}: a picture is written as .png, .svg or .pdf; end its name with one")
    return fmt


def index_labels(shape):
    """The multi-index of each element of an array of `shape`, in C order: '0', '1', … or '0,1', …"""
    return [",".join(map(str, i)) for i in np.ndindex(*shape)] if shape else ["0"]


def _ticks(axis_labels, count):
    """Every position when there are few, about LABELLED_TICKS evenly spaced ones when there are many."""
    step = 1 if count <= LABELLED_TICKS else int(np.ceil(count / LABELLED_TICKS))
    positions = list(range(0, count, step))
    labels = axis_labels if axis_labels is not None else [str(i) for i in range(count)]
    return positions, [labels[i] for i in positions]


def _limit(matrices):
    """The colour scale's half-width: the largest finite magnitude among `matrices` (1 where all are 0 or not
    finite); an inf does not set it, or every finite value would be drawn as 0."""
    largest = max((float(np.abs(m[np.isfinite(m)]).max(initial=0.0)) for m in matrices), default=0.0)
    return largest if largest > 0 else 1.0


def _picture_class():
    from matplotlib.figure import Figure

    class Picture(Figure):
        """A matplotlib Figure that shows itself in Jupyter as a PNG, with or without pyplot's inline backend."""

        def _repr_png_(self):
            return picture_bytes(self)

    return Picture


def picture_bytes(figure, fmt="png"):
    """The file of a matplotlib `figure` in `fmt`, drawn in memory: matplotlib's PNG writer seeks back in
    the file it writes, which a pipe (a FIFO, /dev/stdout) refuses, so callers write these bytes instead."""
    buffer = io.BytesIO()
    figure.savefig(buffer, format=fmt)
    return buffer.getvalue()


def figure(rows, title="", notes=()):
    """A `Picture` of rows of `Panel`s, `title` above and `notes` (lines of text) below; each panel's size grows
    with its matrix, within bounds, with room for the values where they are written in the cells."""
    from matplotlib import colormaps
    from matplotlib.colors import TwoSlopeNorm

    rows = [list(row) for row in rows]
    colours = colormaps[COLOUR_MAP].with_extremes(bad=NOT_FINITE)
    if any(not np.isfinite(p.matrix).all() for row in rows for p in row):
        notes = [*notes, f"{NOT_FINITE}: nan or ±inf, outside the colour scale"]
    ncols = max(len(row) for row in rows)
    annotated = all(p.matrix.size <= ANNOTATED for row in rows for p in row)
    cell = 0.55 if annotated else 0.3  # inches
    widest = max(p.matrix.shape[1] for row in rows for p in row)
    tallest = [max(p.matrix.shape[0] for p in row) for row in rows]
    panel_width = min(7.5, max(3.6, cell * widest + 1.8))
    heights = [min(6.5, max(2.0, cell * h + 1.5)) for h in tallest]
    # as wide as the widest note too: the layout makes room below the panels, not beside them
    size = (max(panel_width * ncols, _notes_width(notes)), sum(heights) + 0.2 * len(notes) + (0.6 if title else 0))
    picture = _picture_class()(figsize=size, layout="constrained")
    grid = picture.add_gridspec(len(rows), ncols, height_ratios=heights)
    limits = {}
    for p in (p for row in rows for p in row):
        limits.setdefault(p.group, []).append(p.matrix)
    limits = {group: _limit(ms) for group, ms in limits.items()}
    for r, row in enumerate(rows):
        for c, p in enumerate(row):
            ax = picture.add_subplot(grid[r, c])
            m = limits[p.group]
            image = ax.imshow(p.matrix, cmap=colours, norm=TwoSlopeNorm(0.0, -m, m), aspect="auto",
                              interpolation="nearest")
            picture.colorbar(image, ax=ax, shrink=0.9)
            ax.set_title(p.title, fontsize=10)
            ax.set_ylabel(p.ylabel, fontsize=9)
            ax.set_xlabel(p.xlabel, fontsize=9)
            for positions, labels, set_ticks, set_labels in (
                    (*_ticks(p.rows, p.matrix.shape[0]), ax.set_yticks, ax.set_yticklabels),
                    (*_ticks(p.columns, p.matrix.shape[1]), ax.set_xticks, ax.set_xticklabels)):
                set_ticks(positions)
                set_labels(labels, fontsize=7)
            if annotated:
                for (i, j), value in np.ndenumerate(p.matrix):
                    ax.text(j, i, f"{value:.2g}" if value else "0", ha="center", va="center", fontsize=6.5,
                            color="white" if not abs(value) <= 0.6 * m else "#1f1f1f")  # light on NOT_FINITE too
    if title:
        picture.suptitle(title, fontsize=11)
    if notes:  # a figure-level label, so that the layout makes room for every line
        picture.supxlabel("\n".join(notes), x=0.01, ha="left", fontsize=NOTES_FONT["size"],
                          family=NOTES_FONT["family"])
    return picture


def _notes_width(notes):
    """Inches that the widest line of `notes` takes in NOTES_FONT, with a margin each side (0 without notes)."""
    from matplotlib.font_manager import FontProperties
    from matplotlib.textpath import TextPath

    if not notes:
        return 0.0
    font = FontProperties(**NOTES_FONT)
    points = max(TextPath((0, 0), line, prop=font).get_extents().width for line in notes)
    return (points + 36) / 72  # a quarter inch each side: the left offset and the layout's padding
