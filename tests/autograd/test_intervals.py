"""autograd.intervals: the one rule for "a number in an interval written as in maths", which the
optimizers, the schedules and the command lines (models.cli.interval) all check with."""
import math
from fractions import Fraction

import numpy as np
import pytest

from autograd.intervals import bounds_of, check, within

INF, NAN = math.inf, math.nan


@pytest.mark.parametrize("bounds, inside, outside", [
    ("[0, 1)", [0, 0.0, 0.5, 1 - 1e-12, np.float32(0.25), np.int64(0), Fraction(1, 3)], [1, 1.0, -1e-300, -1, INF]),
    ("(0, 1]", [1, 1e-300, 0.5], [0, 0.0, -0.0, 1.0000001]),
    ("[0, inf)", [0, 1e300, 10 ** 400], [INF, -1, -INF]),
    ("(0, inf]", [INF, 1e-300, np.float64(INF)], [0, -INF]),
    ("[1, inf)", [1, 2, 10 ** 30], [0, 0.999, INF]),
    ("[-1, inf)", [-1, 0], [-1.5, -2]),
    ("(-inf, inf)", [-1e308, 0, 1e308], [INF, -INF]),
    ("[-inf, inf]", [-INF, INF, 0], []),
    ("[0, 4294967295]", [0, 4294967295], [4294967296, -1]),
])
def test_membership_is_as_in_maths(bounds, inside, outside):
    for value in inside:
        assert within(value, bounds), (value, bounds)
    for value in outside:
        assert not within(value, bounds), (value, bounds)


@pytest.mark.parametrize("value", [NAN, np.float32(NAN), True, False, np.bool_(True), "0.5", None, [0.5], 1j,
                                   np.array([0.5])])
@pytest.mark.parametrize("bounds", ["[0, 1)", "[-inf, inf]", "(0, inf]"])
def test_nan_bools_and_non_numbers_are_in_no_interval(value, bounds):
    assert not within(value, bounds)


@pytest.mark.parametrize("value, bounds, integer, message", [
    (-1, "[0, inf)", False, "Opt: lr must be a number in [0, inf), got -1"),
    (NAN, "[0, 1)", False, "Opt: lr must be a number in [0, 1), got nan"),
    (INF, "[0, inf)", False, "Opt: lr must be a number in [0, inf), got inf"),
    ("1e-3", "[0, inf)", False, "Opt: lr must be a number in [0, inf), got '1e-3'"),
    (True, "[0, inf)", False, "Opt: lr must be a number in [0, inf), got True"),
    (2.0, "[0, inf)", True, "Opt: lr must be an integer in [0, inf), got 2.0"),
    (-2, "[-1, inf)", True, "Opt: lr must be an integer in [-1, inf), got -2"),
    (None, "(0, inf]", False, "Opt: lr must be a number in (0, inf], got None"),
])
def test_check_names_the_owner_the_argument_the_interval_and_the_value(value, bounds, integer, message):
    with pytest.raises(ValueError) as info:
        check("Opt", "lr", value, bounds, integer=integer)
    assert str(info.value) == message


def test_check_returns_what_passes():
    assert check("Opt", "n", 3, "[0, inf)", integer=True) == 3
    assert check("Opt", "n", np.int32(3), "[0, inf)", integer=True) == 3
    assert check("Opt", "x", INF, "(0, inf]") == INF


@pytest.mark.parametrize("text", ["0, 1", "[0; 1)", "{0, 1}", "[a, 1)", "[0, 1, 2]", "", "[0 1)"])
def test_a_mistyped_interval_is_a_clear_error(text):
    with pytest.raises(ValueError, match=r"write it as in maths, e\.g\. '\[0, 1\)' or '\(0, inf\]'"):
        bounds_of(text)


def test_bounds_of_reads_the_ends():
    assert bounds_of("[0, 1)") == (0.0, 1.0, False, True)
    assert bounds_of("(0, inf]") == (0.0, INF, True, False)
