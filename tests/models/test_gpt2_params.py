"""Tests for models.gpt2_params: the shapes and count from the config alone match a built
model, GPT-2 small's and medium's published totals, and what the command prints."""

import pytest

from models.gpt import gpt2_params
from models.gpt.gpt2 import GPTConfig
from models.gpt.gpt2_params import count_parameters, parameter_shapes
from tests.models.test_gpt2 import tiny


@pytest.mark.parametrize("overrides", [{}, dict(bias=False), dict(n_layer=3, n_head=4, n_embd=16, vocab_size=37)])
def test_parameter_count_formula_matches_a_built_model(overrides):
    model = tiny(**overrides)
    assert {n: p.shape for n, p in model.named_parameters()} == parameter_shapes(model.config)
    assert model.num_parameters() == count_parameters(model.config)


def test_gpt2_small_has_124_439_808_parameters():
    assert count_parameters(GPTConfig()) == 124_439_808
    assert count_parameters(GPTConfig(n_layer=24, n_head=16, n_embd=1024)) == 354_823_168  # GPT-2 medium


def test_cli_prints_the_table_and_the_note(capsys):
    gpt2_params.main([])
    out = capsys.readouterr().out
    assert "124,439,808" in out and "124,410,624" in out
    assert "7,087,872" in out and "3,072" in out  # one block; c_fc's real bias
    assert "the illustrated article's table totals 124,410,624 for GPT-2 small" in out
    gpt2_params.main(["--n-layer", "2", "--n-embd", "64", "--n-head", "4"])
    out = capsys.readouterr().out
    config = GPTConfig(n_layer=2, n_embd=64, n_head=4)
    assert f"{count_parameters(config):,}" in out
    # the article has no table for this shape: its slips carried over are an extrapolation, and said to be one
    assert "table totals" not in out and "tabulates GPT-2 small only (124,410,624" in out
    extrapolated = count_parameters(config) - 2 * 3 * 64 - 2 * 64
    assert f"would give {extrapolated:,}" in out and "an extrapolation, not one the article prints" in out


def test_cli_refuses_an_impossible_config_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_info:
        gpt2_params.main(["--n-embd", "10", "--n-head", "4"])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert "n_embd=10 is not divisible by n_head=4" in err


def test_a_billion_layers_are_counted_at_once_not_tensor_by_tensor(capsys):
    """The count once made 12 names a layer: a billion layers ran for minutes, printing nothing."""
    config = GPTConfig(n_layer=10 ** 9)
    one = count_parameters(GPTConfig(n_layer=1))
    two = count_parameters(GPTConfig(n_layer=2))
    assert count_parameters(config) == one + (10 ** 9 - 1) * (two - one) == 7_087_872_039_385_344
    gpt2_params.main(["--n-layer", str(10 ** 9)])
    assert "  total" in capsys.readouterr().out.splitlines()[-5]
