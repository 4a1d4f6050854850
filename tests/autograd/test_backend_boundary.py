"""The engine computes on tensor data only through the backend's array module (`xp`), so CuPy works.

Outside autograd/backend.py, NumPy may appear only for what never touches a
device array: dtypes and their ranges, shape arithmetic, converting the user's
Python data, the host copy `__array__` hands to NumPy, and gradcheck's finite
differences, detect_anomaly's summaries, diverge's comparisons and the heatmaps'
matrices on host copies (made by backend.to_host).
This reads the source, so it holds on a machine without a GPU.
"""
import ast
from pathlib import Path

import autograd

ENGINE = Path(autograd.__file__).resolve().parent

ALLOWED = {
    "tensor.py": {"dtype", "iinfo", "float16", "float32", "generic", "asarray", "array", "ndarray", "array2string",
                  "prod", "broadcast_shapes", "shape"},  # the shape `a += b` would take, before any work: shapes only
    "functional.py": {"dtype", "broadcast_shapes"},
    "kernels/__init__.py": {"float32", "float64"},  # which kernels' instantiation
    "kernels/cuda.py": {"dtype", "float32", "float64", "int32", "int64"},  # kernels' argument types
    # numba's kernels compute on NumPy arrays by definition: kernels.fused hands them NumPy arrays only
    "kernels/cpu.py": {"float32", "float64", "int32", "int64", "floor", "inf", "array", "empty", "empty_like",
                       "ascontiguousarray", "matmul"},
    "gradcheck.py": {"float64", "random", "zeros", "ndindex", "unravel_index", "abs"},
    "anomaly.py": {"isnan", "isinf", "nanmin", "nanmax", "errstate"},  # summaries of host copies; quiet pictures
    # each run's values compared as float64 host copies, and float32's and float64's rounding
    "divergence.py": {"abs", "asarray", "dtype", "errstate", "finfo", "float32", "float64", "inf", "isnan", "where"},
    "heatmaps.py": {"abs", "asarray", "ceil", "float64", "isfinite", "nanmax", "ndarray", "ndenumerate", "ndindex",
                    "shape"},  # host matrices, drawn by matplotlib
}


def numpy_uses(path):
    """Names used as `np.NAME` / `numpy.NAME` in a file's code (docstrings and comments do not count)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in ("np", "numpy")}


def test_numpy_only_where_it_cannot_touch_device_data():
    # the twins are NumPy by definition: they stand in for the CUDA kernels on a machine without a GPU
    files = sorted(p for p in ENGINE.rglob("*.py") if p.name not in ("backend.py", "cuda_twins.py"))
    names = {p.relative_to(ENGINE).as_posix() for p in files}
    assert names >= {"tensor.py", "ops.py", "functional.py", "value.py", "gradcheck.py", "kernels/cpu.py"}
    assert set(ALLOWED) <= names
    for path in files:
        name = path.relative_to(ENGINE).as_posix()
        unexpected = numpy_uses(path) - ALLOWED.get(name, set())
        assert not unexpected, (f"{name} calls numpy.{sorted(unexpected)}: compute through the backend's "
                                "array module (self.xp / backend.xp_for) so CuPy arrays stay on the GPU")


def test_ops_do_not_import_numpy():
    tree = ast.parse((ENGINE / "ops.py").read_text(encoding="utf-8"))
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                for alias in node.names}
    assert "numpy" not in imported
