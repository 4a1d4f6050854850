"""The shared parser (models/cli.py) as every command shows it: one default per option in --help, hints for
nanoGPT's spellings, and the one line for a GPT-2 folder that is not there."""
import argparse
import importlib
import re

import pytest

from models import cli
from models.training import train

COMMANDS = ["models.bigram", "models.neuron", "models.softmax", "models.tiny", "models.tokenizer",
            "models.gpt2_params", "models.sample", "models.train", "viz.graph", "viz.trace", "viz.jacobian",
            "viz.diverge"]


def help_entries(command, capsys):
    """`command --help` as {invocation: its help text on one line}, e.g. {"--n-layer N_LAYER": "… (default: 4)"}."""
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(command).main(["--help"])
    assert exit_info.value.code == 0
    entries, current = {}, None
    for line in capsys.readouterr().out.splitlines():
        if re.match(r"  \S", line):  # an option or positional argument starts; its help may follow on the line
            invocation, _, text = re.split(r"( {2,}|$)", line.strip(), maxsplit=1)
            current = invocation.replace(", ", ",")
            entries[current] = text.strip()
        elif re.match(r" {3,}\S", line) and current is not None:
            entries[current] = (entries[current] + " " + line.strip()).strip()
        else:
            current = None
    return entries


@pytest.mark.parametrize("command", COMMANDS)
def test_every_option_that_takes_a_value_shows_one_readable_default(command, capsys):
    entries = help_entries(command, capsys)
    options = {inv: text for inv, text in entries.items() if inv.startswith("-") and not inv.startswith("-h,")}
    assert len(options) >= {"models.train": 30, "models.sample": 10, "viz.graph": 5}.get(command, 0), entries
    for invocation, text in options.items():
        takes_value = " " in invocation  # "--n-layer N_LAYER"; a switch is its flag alone
        assert text.count("(default: ") == (1 if takes_value else 0), (invocation, text)
        assert "(default: None)" not in text and "(default: none)" not in text, (invocation, text)  # say what it means
        assert "(default: )" not in text, (invocation, text)


def test_the_defaults_read_as_typed_and_none_says_what_it_means(capsys):
    train_help = help_entries("models.train", capsys)
    assert train_help["--n-layer N_LAYER"] == "transformer blocks (default: 4)"
    assert train_help["--out-dir OUT_DIR"] == "the checkpoint folder (default: out)"
    assert train_help["--data PATH"] == ("a UTF-8 text file (default: the shipped Tiny Shakespeare), or a folder of "
                                         "token shards that python -m models.prepare made")
    assert train_help["--lr-decay-iters LR_DECAY_ITERS"].endswith("(default: none, --max-iters)")
    assert train_help["--min-lr MIN_LR"].endswith("(default: 0.0001)")
    sample_help = help_entries("models.sample", capsys)
    assert sample_help["--prompt PROMPT"] == r"text to continue (default: '\n')"
    assert sample_help["checkpoint"] == "a models.train output folder or a GPT-2 folder (default: out)"
    softmax_help = help_entries("models.softmax", capsys)
    assert softmax_help["--z Z [Z ...]"] == "the logits z (2 to 8 of them) (default: 2.0 1.0 0.0)"


def test_a_switch_says_no_default_on_the_python_whose_argparse_appends_one(capsys):
    """Python 3.10's BooleanOptionalAction ends its own help with " (default: %(default)s)" (3.11's does not), and
    `models.train --help` showed "bit for bit (default: False)" for --checkpoint-blocks there."""
    parser = cli.Parser("prog", "a program")
    switch = parser.add_argument("--fast", action=argparse.BooleanOptionalAction, default=False, help="go fast")
    switch.help = "go fast (default: %(default)s)"  # as 3.10 leaves it, on any Python
    parser.print_help()
    assert re.search(r"^  --fast, --no-fast +go fast$", capsys.readouterr().out, re.MULTILINE)


def unknown_option_line(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        train.parse_args(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


@pytest.mark.parametrize("argv, hint", [
    (["--max_iters=10"], "--max_iters=10; did you mean --max-iters?"),
    (["--init_from=gpt2"], "--init_from=gpt2; did you mean --init-from?"),
    (["--eval_iters", "5"], "--eval_iters 5; did you mean --eval-iters?"),  # the value is no option: no hint for it
    (["--max-itres", "5"], "--max-itres 5; did you mean --max-iters?"),  # a near miss (--max-iter would parse)
    (["--learning_rate=1e-3"], "--learning_rate=1e-3; did you mean --lr?"),  # nanoGPT's names for ours
    (["--gradient_accumulation_steps=4"], "--gradient_accumulation_steps=4; did you mean --grad-accum?"),
    (["--n_layer=2", "--wandb_log=True", "--always_save_checkpoint"],
     "--n_layer=2 --wandb_log=True --always_save_checkpoint; did you mean --n-layer for --n_layer=2, "
     "--always-save for --always_save_checkpoint?"),
    (["--wandb_log=True"], "--wandb_log=True"),  # nothing close: no hint
])
def test_unrecognized_options_get_a_hint_in_the_one_line(capsys, argv, hint):
    assert unknown_option_line(argv, capsys) == (f"python -m models.train: error: unrecognized arguments: {hint} "
                                                 "(see --help)\n")


def test_a_negative_number_in_any_notation_is_a_value(capsys):
    """argparse took -1e308, -1E-5 and -inf for options: `--z 1e308 -1e308` was "unrecognized arguments: -1e308"."""
    parser = cli.Parser("prog", "a test")
    parser.add_argument("--z", type=float, nargs="+")
    parser.add_argument("--lr", type=cli.interval(float, "(0, inf)"))
    parser.add_argument("--prompt")
    z = parser.parse_args(["--z", "1e308", "-1e308", "-1E-5", "-.5", "-2.", "-inf", "-Infinity", "-1_000"]).z
    assert z == [1e308, -1e308, -1e-5, -0.5, -2.0, -float("inf"), -float("inf"), -1000.0]
    for argv, message in ((["--lr", "-1e-3"], "argument --lr: must be in (0, inf), got -1e-3"),
                          (["--z", "1", "-1x"], "argument --z: invalid float value: '-1x'"),
                          (["--prompt", "-x"], "argument --prompt: expected one argument; '-x' starts with '-', so "
                                               "it was read as an option: write --prompt=-x to give it as the value")):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert capsys.readouterr().err == f"prog: error: {message} (see --help)\n"


def test_the_softmax_lesson_takes_negative_logits_in_scientific_notation(capsys):
    from models.lessons import softmax
    softmax.main(["--z", "1e3", "-1E3", "-.5"])
    assert "∂p/∂z for z = (1000, -1000, -0.5)" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        softmax.main(["--z", "1", "-inf"])
    assert capsys.readouterr().err == ("python -m models.softmax: error: --z must be finite numbers, got [1.0, -inf] "
                                       "(see --help)\n")


def test_init_from_gpt2_without_the_folder_says_how_to_get_it(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert unknown_option_line(["--init-from", "gpt2"], capsys) == (
        "python -m models.train: error: argument --init-from: no folder gpt2; nothing is downloaded here, so on a "
        "machine with internet run `hf download openai-community/gpt2 config.json model.safetensors --local-dir gpt2` "
        "(or transformers' GPT2LMHeadModel.from_pretrained('gpt2').save_pretrained('gpt2')), then copy the folder "
        "gpt2 here (see --help)\n")
    assert unknown_option_line(["--init-from", "gpt3"], capsys) == (
        "python -m models.train: error: argument --init-from: no folder gpt3 (train one with `python -m models.train "
        "--out-dir gpt3`) (see --help)\n")


def test_counted_says_a_count_of_1_in_the_singular():
    from models.cli import counted
    assert [counted(n, "step") for n in (0, 1, 2)] == ["0 steps", "1 step", "2 steps"]
    assert [counted(n, "batch", "batches") for n in (1, 3)] == ["1 batch", "3 batches"]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    from models.training import prepare
    root = tmp_path_factory.mktemp("prepared")
    (root / "text.txt").write_text("abcab cabca bcabc\n" * 50, encoding="utf-8")
    assert prepare.main([str(root / "text.txt"), "--out", str(root / "data"), "--tokenizer", "char",
                         "--no-progress"]) == 0
    return root / "data"


@pytest.mark.parametrize("command, argv, option", [
    ("models.sample", ["{folder}"], "checkpoint"),
    ("models.eval", ["{folder}", "--data", "{prepared}"], "CHECKPOINT"),
    ("models.export_merged", ["{folder}", "{out}"], "checkpoint"),
    ("models.train", ["--init-from", "{folder}", "--out-dir", "{out}"], "--init-from"),
])
def test_a_model_folder_without_a_model_is_refused_as_the_command_line_is_read(tmp_path, prepared, capsys, command,
                                                                               argv, option):
    """Each was refused only when it came to load the model, with exit status 1, not as a bad option."""
    folder, out = tmp_path / "notes", tmp_path / "out"
    folder.mkdir()
    (folder / "notes.txt").write_text("x")
    with pytest.raises(SystemExit) as exit_info:
        importlib.import_module(command).main([a.format(folder=folder, out=out, prepared=prepared) for a in argv])
    assert exit_info.value.code == 2
    assert capsys.readouterr() == ("", f"python -m {command}: error: argument {option}: no checkpoint in {folder}: "
                                       "expected config.json and model.safetensors (train one with `python -m "
                                       "models.train`) (see --help)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes"]
