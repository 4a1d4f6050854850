"""Numbers and arrays as short text, for the labels of viz.graph and the lines of viz.trace."""
import numpy as np

from autograd import backend
from models.numbers import fixed, is_tiny


def host(array):
    """A NumPy array, wherever `array` lives (CuPy arrays are copied to the host)."""
    return backend.to_host(array) if backend.device_of(array) == "cuda" else np.asarray(array)


def norm(array):
    """The L2 norm of an array (of all its elements), as a Python float."""
    return float(np.linalg.norm(host(array).astype(np.float64).ravel()))


def summary_text(array):
    """A large array in one line: its norm and largest magnitude for floats; for integers and booleans
    (targets, token ids, masks), whose norm means nothing, only how many values there are."""
    a = host(array)
    if a.dtype.kind in "iub":
        return f"({a.size} {'booleans' if a.dtype.kind == 'b' else 'integers'}, not shown)"
    return f"‖·‖ = {number(norm(a), 6)}, max |·| = {number(float(abs(a).max()), 6)}  ({a.size} values, not shown)"


def shape_text(shape):
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def number(x, digits=4):
    """A short number for a label: 4 significant digits."""
    return f"{x:.{digits}g}"


def values_text(array, decimals=6):
    """An array's values in NumPy's layout (one line per row): `decimals` places, but 1.23e-05 for a nonzero
    value below 1e-4 or below what `decimals` places show (the lesson commands' rule, models.numbers), so that
    tiny never reads as zero; integers as integers."""
    a = host(array)
    if a.dtype.kind in "iub":
        return str(a.astype(np.int64).item()) if a.ndim == 0 else np.array2string(a.astype(np.int64), separator=", ")
    a = a.astype(np.float64) + 0.0  # + 0.0 turns −0.0 into 0.0
    tiny = is_tiny(a, decimals)
    if a.ndim == 0:
        if tiny:
            return fixed(a, decimals)
        a = np.round(a, decimals) + 0.0
        return np.format_float_positional(float(a), precision=decimals, unique=True, trim=".").rstrip(".") \
            if float(a) != int(a) else f"{float(a):.1f}"
    if tiny.any():
        width = max(len(fixed(x, decimals)) for x in a.ravel())  # 1.23e-05 is wider than 0.12: one column width
        return np.array2string(a, separator=", ", max_line_width=100, threshold=10**9, formatter={
            "float_kind": lambda x: fixed(x, decimals).rjust(width)})
    a = np.round(a, decimals) + 0.0
    return np.array2string(a, separator=", ", precision=decimals, floatmode="fixed", suppress_small=True,
                           max_line_width=100, threshold=10**9)
