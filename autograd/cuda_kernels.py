"""CUDA sources of fused kernels, for CuPy: one pass over memory where composed array code makes many.

Each kernel computes exactly the formula of its op in ops.py (whose docstring
states the Jacobian); it exists only because on a GPU one elementwise pass
beats the ten or so passes (and temporaries) of the composed expression.
backend.fused() compiles them with CuPy's ElementwiseKernel on first use, on
a GPU only; the CPU never sees them. AUTOGRAD_FUSED=0 switches them off, so a
benchmark can time the composed version against them.

Each entry: (input parameters, output parameters, body), T the float type.
"""

# GELU, tanh approximation: y = ½x(1 + tanh u), u = √(2/π)(x + 0.044715x³)
GELU_FORWARD = ("T x", "T y", """
    const T c = 0.7978845608028654, a = 0.044715;
    const T t = tanh(c * (x + a * x * x * x));
    y = T(0.5) * x * (T(1) + t);
""")

# dx = g · [½(1 + t) + ½x(1 − t²) · √(2/π)(1 + 3·0.044715x²)]
GELU_BACKWARD = ("T x, T g", "T dx", """
    const T c = 0.7978845608028654, a = 0.044715;
    const T t = tanh(c * (x + a * x * x * x));
    dx = g * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * c * (T(1) + T(3) * a * x * x));
""")

# nn.optim.AdamW's update in one pass instead of a dozen (its docstring has the formula; w, m, v in place):
# m ← m + (1−β₁)(g − m);  v ← β₂v + (1−β₂)g²;  w ← w·decay + step_size · m / (√v + eps)
ADAMW = ("T g, T decay, T beta1, T beta2, T eps, T step_size", "T w, T m, T v", """
    m += (T(1) - beta1) * (g - m);
    v = beta2 * v + (T(1) - beta2) * g * g;
    w = w * decay + step_size * m / (sqrt(v) + eps);
""")

KERNELS = {"gelu_forward": GELU_FORWARD, "gelu_backward": GELU_BACKWARD, "adamw": ADAMW}
