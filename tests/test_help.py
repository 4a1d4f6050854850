"""Every command's --help: a whole description, a text for every option, and no default shown for a required one."""
import argparse
import importlib
import os
from pathlib import Path

import pytest

from models.cli import Parser

COMMANDS = ["models.train", "models.sample", "models.prepare", "models.eval", "models.export_merged",
            "models.troubleshoot", "models.gpt2_params", "models.bigram", "models.tiny", "models.moons",
            "models.neuron", "models.softmax", "models.tokenizer", "viz.graph", "viz.trace"]
BENCHMARKS = ["anomaly", "contention", "cpu_kernels", "generate", "gpt2", "gpu", "lora", "main_job", "overhead",
              "prepare", "products", "scaling", "step_profile", "tokenizer", "train_step", "value_vs_micrograd"]


class _Built(Exception):
    """Raised from the first parse, carrying the parser the command built."""


def parser_of(command, monkeypatch):
    """The Parser that `command`'s main() builds, caught before it parses anything (argparse's own parser too,
    so that a command built on it fails its test rather than running)."""
    def caught(self, *args, **kwargs):
        raise _Built(self)

    monkeypatch.setattr(argparse.ArgumentParser, "parse_known_args", caught)
    with pytest.raises(_Built) as built:
        importlib.import_module(command).main([])
    return built.value.args[0]


@pytest.mark.parametrize("command", COMMANDS)
def test_help_texts(command, monkeypatch):
    parser = parser_of(command, monkeypatch)
    assert parser.description.rstrip().endswith((".", ")")), parser.description  # not cut mid-sentence
    silent = [action.option_strings or action.dest for action in parser._actions if not action.help]
    assert silent == [], f"{command}: options without a help text: {silent}"
    shown = parser.format_help()
    for action in parser._actions:
        if action.required and action.option_strings:
            flag = action.option_strings[0]
            line = next(line for line in shown.splitlines() if line.strip().startswith(flag))
            assert "(default" not in line, line


def test_grad_clip_says_what_it_bounds(monkeypatch):
    actions = parser_of("models.train", monkeypatch)._actions
    help_text = next(a.help for a in actions if "--grad-clip" in a.option_strings)
    assert "maximum global gradient norm" in help_text


def test_eval_help_says_which_tokens_it_scores(monkeypatch):
    """--help showed only the docstring's first line: not the windows, nor that the first token goes unscored."""
    shown = " ".join(parser_of("models.eval", monkeypatch).format_help().split())
    assert ("so every token after the first (which has nothing before it to be predicted from) is scored exactly "
            "once, and each, but those of the first window, with at least T − stride tokens of context.") in shown


def test_export_merged_describes_itself_whole(monkeypatch):
    description = parser_of("models.export_merged", monkeypatch).description
    assert description.endswith("that transformers loads."), description


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_help_texts(name, monkeypatch):
    monkeypatch.setenv("CUPY_TF32", os.environ.get("CUPY_TF32", "1"))  # benchmarks.gpu sets it as it is imported
    parser = parser_of(f"benchmarks.{name}", monkeypatch)
    assert isinstance(parser, Parser), type(parser)  # its HelpFormatter shows every default
    assert parser.prog == f"python -m benchmarks.{name}", parser.prog
    assert parser.description.rstrip().endswith((".", ")")), parser.description  # not cut mid-sentence
    silent = [action.option_strings or action.dest for action in parser._actions if not action.help]
    assert silent == [], f"benchmarks.{name}: options without a help text: {silent}"
    for action in parser._actions:
        shown = parser._get_formatter()._format_action(action)
        assert shown.count("(default") <= 1, shown
        assert os.getcwd() not in shown and str(Path(__file__).resolve().parents[1]) not in shown, shown
