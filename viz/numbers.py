"""Numbers and arrays as short text, for the labels of viz.graph and the lines of viz.trace."""
import numpy as np

from autograd import backend


def host(array):
    """A NumPy array, wherever `array` lives (CuPy arrays are copied to the host)."""
    return backend.to_host(array) if backend.device_of(array) == "cuda" else np.asarray(array)


def norm(array):
    """The L2 norm of an array (of all its elements), as a Python float."""
    return float(np.linalg.norm(host(array).astype(np.float64).ravel()))


def shape_text(shape):
    return "(" + ", ".join(str(n) for n in shape) + ("," if len(shape) == 1 else "") + ")"


def number(x, digits=4):
    """A short number for a label: 4 significant digits."""
    return f"{x:.{digits}g}"


def values_text(array, decimals=6):
    """An array's values rounded to `decimals`, in NumPy's layout (one line per row, columns aligned)."""
    a = np.round(host(array).astype(np.float64), decimals) + 0.0  # + 0.0 turns −0.0 into 0.0
    if a.ndim == 0:
        return np.format_float_positional(float(a), precision=decimals, unique=True, trim=".").rstrip(".") \
            if float(a) != int(a) else f"{float(a):.1f}"
    return np.array2string(a, separator=", ", precision=decimals, floatmode="fixed", suppress_small=True,
                           max_line_width=100, threshold=10**9)
