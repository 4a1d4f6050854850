"""Lesson 000's softmax Jacobian, printed: the engine's full ∂p/∂z beside diag(p) − ppᵀ computed from p.

What this file promises:

* `softmax_jacobian(z)`: (p, J, formula) for a float64 vector z: J is
  `ag.jacobian(ag.softmax, z)`, one backward pass per output, and formula is
  diag(p) − ppᵀ from p alone. They agree to rounding: the engine's softmax
  never builds J, it applies it as the VJP dz = p ⊙ (g − Σ g⊙p).
* `python -m models.softmax [--z 2 1 0]`: the lesson's z = (2, 1, 0) by default,
  p = (0.665241, 0.244728, 0.090031), both matrices, their largest difference,
  and the VJP of one upstream gradient done both ways.
"""
import numpy as np

import autograd as ag
from models.cli import Parser
from models.numbers import fixed, format_table, section

LESSON_Z = (2.0, 1.0, 0.0)


def softmax_jacobian(z):
    """(p, the engine's Jacobian, diag(p) − ppᵀ) for a vector z, all float64 host arrays."""
    z = np.asarray(z, dtype=np.float64)
    p = ag.softmax(ag.Tensor(z)).numpy()
    return p, ag.jacobian(ag.softmax, z), np.diag(p) - np.outer(p, p)


def main(argv=None):
    parser = Parser("python -m models.softmax", __doc__.split("\n")[0])
    parser.add_argument("--z", type=float, nargs="+", default=list(LESSON_Z), metavar="Z",
                        help="the logits z (2 to 8 of them)")
    args = parser.parse_args(argv)
    if not 2 <= len(args.z) <= 8:
        parser.error(f"--z takes 2 to 8 numbers, got {len(args.z)}")
    if not np.all(np.isfinite(args.z)):
        parser.error(f"--z must be finite numbers, got {args.z}")

    z = np.array(args.z)
    p, jacobian, formula = softmax_jacobian(z)
    # e^z overflows past z ≈ 709 and underflows to 0 below about −745 (0 / 0 is no p): subtracting max z leaves p
    # the same and puts the largest e^z at 1
    shift = z.max() if abs(z.max()) > 50 else 0.0
    e = np.exp(z - shift)
    names = [f"z{j}" for j in range(len(z))]
    rows = [f"p{i}" for i in range(len(z))]
    section("softmax 的雅可比", f"lesson 000: ∂p/∂z for z = ({', '.join(f'{v:g}' for v in z)})")
    shifted = f" (z shifted by {shift:g}: the same p, its largest e^z now 1)" if shift else ""
    print(f"  p = e^z / Σ e^z = ({', '.join(fixed(v) for v in e)}) / {fixed(e.sum())}{shifted}")
    print(f"    = ({', '.join(fixed(v) for v in p)})")
    print("\n  the engine: ag.jacobian(ag.softmax, z), one backward pass per output p_i")
    print(format_table(jacobian, rows, names))
    print("\n  the lesson's formula, from p alone: ∂p_i/∂z_j = p_i (δ_ij − p_j), i.e. diag(p) − p pᵀ")
    print(format_table(formula, rows, names))
    print(f"  largest difference: {np.abs(jacobian - formula).max():.1e}; each column sums to 0 "
          f"(to rounding: {np.abs(formula.sum(axis=0)).max():.1e}), since Σ p_i = 1 whatever z is")
    g = np.eye(len(z))[0]
    with_matrix = g @ formula
    as_vjp = p * (g - (g * p).sum())
    print("\n  the engine never builds that matrix: backward applies it to the incoming gradient g.")
    print(f"  for g = ({', '.join(f'{v:g}' for v in g)}): gᵀJ = ({', '.join(fixed(v) for v in with_matrix)}), "
          f"p ⊙ (g − Σ g⊙p) = ({', '.join(fixed(v) for v in as_vjp)})")


if __name__ == "__main__":
    main()
