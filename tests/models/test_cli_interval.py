"""models.cli.interval: an option's range, checked as it is parsed, by the rule the optimizers use too
(autograd.intervals), with the messages the command lines print."""
import argparse

import pytest

from autograd.intervals import within
from models.cli import Parser, interval


@pytest.mark.parametrize("kind, bounds, text, value", [
    (int, "[1, inf)", "1", 1), (int, "[0, inf)", "0", 0), (float, "(0, inf)", "2e-3", 2e-3),
    (float, "[0, 1)", "0.99", 0.99), (float, "(0, 1]", "1", 1.0), (int, "[0, 4294967295]", "4294967295", 4294967295),
])
def test_values_inside_are_parsed(kind, bounds, text, value):
    got = interval(kind, bounds)(text)
    assert got == value and type(got) is kind


@pytest.mark.parametrize("kind, bounds, text, message", [
    (int, "[1, inf)", "0", "must be in [1, inf), got 0"),
    (float, "(0, inf)", "-1", "must be in (0, inf), got -1"),
    (float, "(0, inf)", "nan", "must be in (0, inf), got nan"),
    (float, "(0, inf)", "inf", "must be in (0, inf), got inf"),
    (float, "[0, 1)", "1.0", "must be in [0, 1), got 1.0"),
    (float, "(0, 1]", "0", "must be in (0, 1], got 0"),
    (int, "[0, 4294967295]", "-1", "must be in [0, 4294967295], got -1"),
    (int, "[1, inf)", "1.5", "expected an integer in [1, inf), got '1.5'"),
    (float, "[0, 1)", "half", "expected a number in [0, 1), got 'half'"),
])
def test_values_outside_are_one_line_naming_the_range(kind, bounds, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as info:
        interval(kind, bounds)(text)
    assert str(info.value) == message


@pytest.mark.parametrize("bounds", ["[0, 1)", "(0, inf)", "[1, inf)", "(0, 1]", "[0, inf]"])
@pytest.mark.parametrize("text", ["-1", "0", "0.5", "1", "2", "inf", "-inf", "nan", "1e300"])
def test_the_rule_is_the_optimizers(bounds, text):
    """One rule: what interval accepts is exactly what autograd.intervals.within accepts (and so nn.optim)."""
    try:
        interval(float, bounds)(text)
        accepted = True
    except argparse.ArgumentTypeError:
        accepted = False
    assert accepted == within(float(text), bounds)


def test_a_mistyped_interval_fails_when_the_parser_is_built():
    with pytest.raises(ValueError, match=r"interval '\[0, 1': write it as in maths"):
        interval(float, "[0, 1")


def test_a_bad_option_is_one_line(capsys):
    parser = Parser("prog", "a test")
    parser.add_argument("--lr", type=interval(float, "(0, inf)"))
    with pytest.raises(SystemExit):
        parser.parse_args(["--lr", "0"])
    assert capsys.readouterr().err == "prog: error: argument --lr: must be in (0, inf), got 0 (see --help)\n"
