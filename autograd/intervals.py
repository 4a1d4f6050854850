"""Is a number inside an interval written as in maths, "[0, 1)" or "(0, inf]"? The one range rule of every check.

The rule: the value is a real number (a bool is not, NaN is in no interval),
above `low` (or equal to it, where "[" closes that end) and below `high` (or
equal, where "]" closes it). So an infinity passes only an end closed at it,
as in "(0, inf]", and "[0, inf)" refuses it. nn.optim checks hyper-parameters
and schedules with `check`; models.cli checks command-line options with
`within`. It lives in the engine, the bottom layer, so that both can import it.
"""
import functools
import numbers


@functools.lru_cache(maxsize=None)
def bounds_of(bounds):
    """(low, high, low_open, high_open) of an interval's text, such as "[0, 1)"."""
    opening, closing, inside = bounds[:1], bounds[-1:], bounds[1:-1].split(",")
    try:
        if opening not in ("[", "(") or closing not in ("]", ")") or len(inside) != 2:
            raise ValueError
        low, high = (float(end) for end in inside)
    except ValueError:
        raise ValueError(f"interval {bounds!r}: write it as in maths, e.g. '[0, 1)' or '(0, inf]'") from None
    return low, high, opening == "(", closing == ")"


def within(value, bounds):
    """Whether `value` is a real number inside `bounds`."""
    low, high, low_open, high_open = bounds_of(bounds)
    if not isinstance(value, numbers.Real) or isinstance(value, bool) or value != value:  # NaN ≠ NaN
        return False
    return (low < value if low_open else low <= value) and (value < high if high_open else value <= high)


def check(owner, name, value, bounds, integer=False):
    """`value`, if it is a number (an integer, with `integer`) inside `bounds`; else a one-line ValueError.

    The message names the owner (the class or function checking), the argument,
    the interval and the value given, e.g. "AdamW: lr must be a number in [0, inf), got -1".
    """
    if not within(value, bounds) or (integer and not isinstance(value, numbers.Integral)):
        raise ValueError(f"{owner}: {name} must be {'an integer' if integer else 'a number'} in {bounds}, "
                         f"got {value!r}")
    return value
