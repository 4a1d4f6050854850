"""The words a learner reads on an op: its inputs' roles, the data it was given, the forward values its rule uses.

The engine's ops know their inputs by position and keep for backward whatever
is cheapest. A reader wants names: A and B of A @ B (the names its rule
`dA = G Bᵀ, dB = Aᵀ G` uses), the logits and targets of cross-entropy, the
p its rule p − y reads. This module holds those names, op by op, so the
picture and the trace say the same thing.
"""
from autograd import backend

# Input roles, for ops whose inputs play different parts (an Add's two inputs need no names).
INPUT_ROLES = {
    "Sub": ("x", "y"), "Div": ("x", "y"), "Pow": ("x", "y"), "MatMul": ("A", "B"),
    "Linear": ("x", "W", "b"), "CrossEntropy": ("logits",), "Embedding": ("W",),
    "LayerNorm": ("x", "γ", "β"), "ScaledDotProductAttention": ("q", "k", "v"), "Where": ("a", "b"),
}

# What each op keeps with save(), in order, named as its rule names it.
SAVED_NAMES = {
    "Mul": ("x", "y"), "Div": ("y", "z"), "Pow": ("x", "y", "z"), "MatMul": ("A", "B"), "Linear": ("x", "W"),
    "Exp": ("z",), "Log": ("x",), "Sqrt": ("z",), "Tanh": ("z",), "Sigmoid": ("z",), "ReLU": ("z",),
    "GELU": ("x", "s = σ(2u)"), "Max": ("1[x = max]", "#ties"), "Softmax": ("p",), "LogSoftmax": ("log p",),
    "CrossEntropy": ("p", "targets", "kept"), "LayerNorm": ("x̂", "1/σ", "γ"), "Dropout": ("mask",),
    "ScaledDotProductAttention": ("q", "k", "v", "O", "dropout mask", "P", "logsumexp"),
}


# Value's ops (chapter one): the local derivative of out with respect to each input, as the picture prints it.
VALUE_RULES = {
    "+": "∂out/∂a = 1, ∂out/∂b = 1", "*": "∂out/∂a = b, ∂out/∂b = a", "**": "∂out/∂x = k·x^(k−1)",
    "exp": "∂out/∂x = eˣ = out", "log": "∂out/∂x = 1/x", "tanh": "∂out/∂x = 1 − out²",
    "sigmoid": "∂out/∂x = out·(1 − out)", "relu": "∂out/∂x = 1[x > 0]",
}


def input_roles(op, count):
    """A role name for each of an op's `count` inputs ("" where the op gives none)."""
    roles = INPUT_ROLES.get(op.name, ())
    return [roles[i] if i < len(roles) else "" for i in range(count)]


def constants(op):
    """The arrays an op was given as keyword data, not as tensors: [(name, array)], e.g. targets, ids, masks."""
    return [(name, value) for name, value in (op.params or {}).items() if backend.device_of(value) is not None]


def reduction_note(op):
    """For a mean over rows (cross-entropy's default): "mean over B rows: × 1/B"; otherwise ""."""
    params = op.params or {}
    if op.name != "CrossEntropy" or params.get("reduction") != "mean":  # also when backward freed params
        return ""
    targets = params["targets"]
    ignore = params.get("ignore_index")
    rows = int(targets.size if ignore is None else (targets != ignore).sum())
    return f"mean over {rows} row{'s' if rows != 1 else ''}: × 1/{rows}"


def saved_values(op):
    """The forward values an op's rule reads, by name: [(name, array)].

    LayerNorm keeps x̂ and 1/σ; its rule reads x̂ and σ, so those are what is
    shown. Arrays the op kept under another name come out as saved[i].
    """
    saved = op.saved or ()
    names = SAVED_NAMES.get(op.name, ())
    if op.name == "LayerNorm" and len(saved) == 3:
        xhat, rstd, weight = saved
        return [("x̂", xhat), ("σ", 1 / rstd), ("γ", weight)]
    return [(names[i] if i < len(names) else f"saved[{i}]", a) for i, a in enumerate(saved)
            if a is not None and hasattr(a, "shape")]
