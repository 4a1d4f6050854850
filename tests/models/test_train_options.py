"""models.train's front door: presets, the plain log lines, --eval-only and the MFU yardstick, by what they print
and what the checkpoint stores."""
import json
import os
import re
import sys
from pathlib import Path

import pytest

from models.training import train
from tests.models.conftest import random_gpt2_folder
from tests.models.test_train import TINY, run


def options(folder):
    return json.loads((folder / "train_state.json").read_text())["options"]


def test_a_preset_sets_its_options_and_an_option_given_beside_it_wins(tmp_path, capsys):
    args = train.parse_args(["--preset", "shakespeare-char", "--max-iters", "10", "--lr", "1e-3",
                             "--out-dir", str(tmp_path / "o")])
    assert capsys.readouterr().out == ("preset shakespeare-char: the command line's --max-iters 10 (the preset's "
                                       "5000) wins\n")  # --lr 1e-3 is the preset's own value: nothing to say
    assert {name: getattr(args, name) for name in train.SHAKESPEARE_CHAR} == {**train.SHAKESPEARE_CHAR,
                                                                             "max_iters": 10}
    assert (args.n_layer, args.n_head, args.n_embd, args.block_size, args.batch_size, args.dropout) == \
        (6, 6, 384, 256, 64, 0.2)
    assert (args.lr, args.min_lr, args.beta2, args.warmup_iters, args.lr_decay_iters) == (1e-3, 1e-4, 0.99, 100, 5000)
    assert (args.eval_interval, args.eval_iters) == (250, 200)


def test_cpu_small_is_the_defaults(tmp_path, capsys):
    plain = vars(train.parse_args(["--out-dir", str(tmp_path / "o")]))
    preset = vars(train.parse_args(["--preset", "cpu-small", "--out-dir", str(tmp_path / "o")]))
    assert capsys.readouterr().out == ""
    assert {k: v for k, v in preset.items() if k not in ("preset", "given")} == \
        {k: v for k, v in plain.items() if k not in ("preset", "given")}
    assert preset["preset"] == "cpu-small"


def test_help_lists_what_each_preset_sets(capsys):
    from tests.models.test_cli import help_entries
    text = help_entries("models.train", capsys)["--preset {cpu-small,shakespeare-char}"]
    assert ("shakespeare-char: nanoGPT's config/train_shakespeare_char.py, a recipe for one GPU (n-layer 6, n-head 6, "
            "n-embd 384, block-size 256, dropout 0.2, batch-size 64, grad-accum 1, lr 0.001, max-iters 5000, "
            "lr-decay-iters 5000, min-lr 0.0001, beta2 0.99, warmup-iters 100, eval-interval 250, eval-iters 200, "
            "log-interval 10); cpu-small: this program's defaults, nanoGPT's CPU run of it (n-layer 4, n-head 4, "
            "n-embd 128, block-size 64, dropout 0.0, batch-size 12,") in text
    assert text.endswith("An option given beside a preset wins, and a line says so (default: none, each option's "
                         "own default)")


def test_the_checkpoint_stores_the_presets_values_and_resume_keeps_or_replaces_them(tmp_path, capsys):
    code, out, err = run(capsys, "--preset", "shakespeare-char", "--max-iters", "4", "--out-dir", str(tmp_path))
    assert code == 0, err
    assert out.startswith("preset shakespeare-char: the command line's --n-layer 1 (the preset's 6), --n-head 2 "
                          "(the preset's 6), --n-embd 16 (the preset's 384), --block-size 16 (the preset's 256), "
                          "--batch-size 4 (the preset's 64), --max-iters 4 (the preset's 5000), --lr-decay-iters 20 "
                          "(the preset's 5000), --warmup-iters 2 (the preset's 100), --eval-interval 10 (the "
                          "preset's 250), --eval-iters 2 (the preset's 200) win\n")
    saved = options(tmp_path)
    assert (saved["preset"], saved["dropout"], saved["lr"], saved["n_layer"]) == ("shakespeare-char", 0.2, 1e-3, 1)
    code, out, err = run(capsys, "--max-iters", "6", "--out-dir", str(tmp_path), "--resume")
    assert code == 0, err
    assert "resume: the command line changes --max-iters 4 → 6; all else as the checkpoint had it\n" in out
    assert options(tmp_path) == {**saved, "max_iters": 6}
    code, out, err = run(capsys, "--max-iters", "8", "--out-dir", str(tmp_path), "--resume", "--preset", "cpu-small")
    assert code == 0, err
    assert ("resume: the command line changes --dropout 0.2 → 0.0, --max-iters 6 → 8, --lr 0.001 → 0.002, "
            "--preset shakespeare-char → cpu-small; all else as the checkpoint had it") in out  # TINY gives the rest
    assert options(tmp_path) == {**saved, "max_iters": 8, "dropout": 0.0, "lr": 2e-3, "preset": "cpu-small"}


LOG_LINE = re.compile(r"iter +(\d+): loss (\d+\.\d{4}), \d+ ms, [\d,]+ tok/s, mfu \d+\.\d%")


@pytest.mark.parametrize("progress", [["--no-progress"], []])  # without a terminal, no bar either way
def test_without_a_bar_a_plain_line_every_log_interval(tmp_path, capsys, progress, monkeypatch):
    argv = [a for a in TINY if a != "--no-progress"] + progress
    code = train.main([*argv, "--max-iters", "20", "--log-interval", "5", "--out-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    history = json.loads((tmp_path / "train_state.json").read_text())["history"]
    logged = [LOG_LINE.fullmatch(line) for line in out.splitlines() if LOG_LINE.fullmatch(line)]
    assert [(int(m[1]), m[2]) for m in logged] == [(i, f"{history[i - 1]:.4f}") for i in (5, 10, 15, 20)]
    lines = out.splitlines()
    assert lines.index("iter    10: " + logged[1][0].split(": ", 1)[1]) < next(
        i for i, line in enumerate(lines) if line.startswith("iter    10: train loss"))  # the step, then its eval


SPEED_LINE = re.compile(r"speed: ([\d,]+) tokens/s over (\d+) iterations \(([\d.]+) ms each; the first iteration, "
                        r"([\d,]+) ms with the kernels' loading, and evaluations not counted\)")


def test_the_speed_leaves_out_the_first_step_as_it_leaves_out_evaluations(tmp_path, capsys):
    """The first step loads the kernels (on a cold cache, compiles them): counted, it made a short run's speed read
    several times slower than its steps. The line's figures are the mean of the steps it prints after the first."""
    code = train.main([*TINY, "--max-iters", "6", "--log-interval", "1", "--out-dir", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == 0, err
    ms = [int(line.split(", ")[1].removesuffix(" ms")) for line in out.splitlines() if LOG_LINE.fullmatch(line)]
    speeds = [SPEED_LINE.fullmatch(line) for line in out.splitlines() if line.startswith("speed: ")]
    assert len(ms) == 6 and len(speeds) == 1 and speeds[0], out
    tokens_per_s, steps, each, first = speeds[0].groups()
    assert int(steps) == 5
    assert abs(float(each) - sum(ms[1:]) / 5) <= 0.5  # the printed steps are rounded to whole milliseconds
    assert abs(int(first.replace(",", "")) - ms[0]) <= 1
    tokens = 4 * 16  # per iteration: the batch's rows times the block; `each` is rounded to 0.1 ms
    assert tokens / (float(each) + 0.05) * 1e3 - 1 <= int(tokens_per_s.replace(",", "")) <= \
        tokens / (float(each) - 0.05) * 1e3 + 1


def test_a_count_of_1_is_singular_in_what_train_prints(tmp_path, capsys):
    """It printed "over 1 iterations" and "model: 1 layers"."""
    code, out, err = run(capsys, "--max-iters", "2", "--n-head", "1", "--out-dir", str(tmp_path))
    assert code == 0, err
    assert "\nmodel: 1 layer, 1 head, 16 wide, block 16, vocab " in "\n" + out
    assert re.search(r"^speed: [\d,]+ tokens/s over 1 iteration \(", out, re.MULTILINE), out
    code, out, err = run(capsys, "--max-iters", "2", "--eval-only", "--eval-iters", "1", "--resume",
                         "--out-dir", str(tmp_path))
    assert code == 0, err
    assert out.endswith("(1 batch of 4 x 16 tokens per split)\n"), out


def test_log_interval_0_prints_no_step_lines(tmp_path, capsys):
    code, out, err = run(capsys, "--max-iters", "10", "--log-interval", "0", "--out-dir", str(tmp_path))
    assert code == 0, err
    assert not [line for line in out.splitlines() if LOG_LINE.fullmatch(line)]
    assert "iter    10: train loss" in out


def test_on_a_terminal_a_bar_and_no_step_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    argv = [a for a in TINY if a != "--no-progress"]
    assert train.main([*argv, "--max-iters", "10", "--log-interval", "5", "--out-dir", str(tmp_path)]) == 0
    out, err = capsys.readouterr()
    assert not [line for line in out.splitlines() if LOG_LINE.fullmatch(line)]
    assert "10/10" in err and "tok/s, mfu" in err  # tqdm's bar, with the same numbers as its postfix


def test_eval_only_prints_the_checkpoints_losses_and_writes_nothing(tmp_path, capsys):
    folder = tmp_path / "o"
    assert run(capsys, "--max-iters", "10", "--out-dir", str(folder))[0] == 0
    last = json.loads((folder / "train_state.json").read_text())["evals"][-1]
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code = train.main(["--eval-only", "--out-dir", str(folder)])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert out == (f"eval-only: the checkpoint in {folder} (iteration 10): train loss {last['train']:.4f}, "
                   f"val loss {last['val']:.4f} (2 batches of 4 x 16 tokens per split)\n")  # its own options
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["o"]  # no lock, no temporary folder
    fresh = tmp_path / "fresh"
    code = train.main(["--eval-only", "--init-from", str(folder), "--out-dir", str(fresh), "--eval-iters", "3",
                       "--block-size", "16"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert re.fullmatch(rf"eval-only: {folder}: train loss \d\.\d{{4}}, val loss \d\.\d{{4}} \(3 batches of 12 x 16 "
                        r"tokens per split\)\n", out)
    assert not fresh.exists()


def test_eval_only_reads_a_checkpoint_in_a_folder_it_could_not_write(tmp_path, capsys, monkeypatch):
    """--eval-only writes nothing, yet --out-dir's check that a save could write there refused a read-only
    checkpoint (a shared or read-only mount) at parse time; training there is still refused."""
    assert run(capsys, "--max-iters", "2", "--out-dir", str(tmp_path / "ro" / "o"))[0] == 0
    capsys.readouterr()
    writable = os.access  # as root os.access allows every write: answer as a read-only mount would
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: not (mode & os.W_OK and tmp_path / "ro" in
                                                                   [Path(path), *Path(path).parents])
                        and writable(path, mode, **kw))
    assert train.main(["--eval-only", "--out-dir", str(tmp_path / "ro" / "o")]) == 0
    assert capsys.readouterr().out.startswith(f"eval-only: the checkpoint in {tmp_path / 'ro' / 'o'} (iteration 2): "
                                              "train loss ")
    with pytest.raises(SystemExit):
        train.main(["--resume", "--max-iters", "4", "--out-dir", str(tmp_path / "ro" / "o")])
    assert capsys.readouterr().err == (f"python -m models.train: error: argument --out-dir: cannot write "
                                       f"{tmp_path / 'ro' / 'o'}: {tmp_path / 'ro'} is not writable (see --help)\n")


@pytest.mark.parametrize("argv, message", [
    ([], "--eval-only: no checkpoint in {o} to evaluate; give the --out-dir of a run, or --init-from DIR"),
    (["--overwrite"], "--eval-only writes nothing, so there is nothing for --overwrite to replace"),
])
def test_eval_only_without_a_checkpoint_is_one_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        train.parse_args(["--eval-only", "--out-dir", str(tmp_path / "o"), *argv])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (f"python -m models.train: error: {message.format(o=tmp_path / 'o')} "
                                       "(see --help)\n")


@pytest.mark.parametrize("damage, problem", [
    (lambda path: path.write_text("["), "is not valid JSON"),
    (lambda path: path.mkdir(), "is not a regular file (a folder, FIFO or device)"),  # once a traceback
], ids=["not JSON", "a folder"])
def test_eval_only_on_a_damaged_checkpoint_says_what_is_damaged(tmp_path, capsys, damage, problem):
    """It once said there was no checkpoint at all, where --resume names the file and what is wrong with it."""
    (tmp_path / "o").mkdir()
    damage(tmp_path / "o" / "train_state.json")
    with pytest.raises(SystemExit) as exit_info:
        train.parse_args(["--eval-only", "--out-dir", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith(f"python -m models.train: error: {tmp_path / 'o' / 'train_state.json'} {problem}")


def measured(*flops):
    """A stand-in for measure_peak_flops that returns each of `flops` in turn (the last one from then on)."""
    given = list(flops)
    return lambda device, **how: given.pop(0) if len(given) > 1 else given[0]


def test_a_resumed_run_keeps_the_higher_of_its_own_and_the_checkpoints_peak(tmp_path, capsys, monkeypatch):
    at = TINY.index("--peak-tflops")
    argv = [*TINY[:at], *TINY[at + 2:], "--always-save"]
    monkeypatch.setattr(train, "measure_peak_flops", measured(5e10))
    assert train.main([*argv, "--max-iters", "10", "--out-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert ("; peak 50.0 GFLOP/s for MFU (the fastest of repeated 1024² matmuls, re-measured at every evaluation; "
            "--peak-tflops fixes it)\n") in out
    assert options(tmp_path)["peak_tflops"] == 0.05
    monkeypatch.setattr(train, "measure_peak_flops", measured(2e10))  # a busy machine: the checkpoint's is higher
    assert train.main([*argv, "--max-iters", "20", "--out-dir", str(tmp_path), "--resume"]) == 0
    out = capsys.readouterr().out
    assert ("; peak 50.0 GFLOP/s for MFU (the checkpoint's; 20.0 GFLOP/s measured now; re-measured at every "
            "evaluation)\n") in out
    assert options(tmp_path)["peak_tflops"] == 0.05
    monkeypatch.setattr(train, "measure_peak_flops", measured(8e10))  # the checkpoint started on a busy machine
    assert train.main([*argv, "--max-iters", "30", "--out-dir", str(tmp_path), "--resume"]) == 0
    assert "; peak 80.0 GFLOP/s for MFU (the fastest of" in capsys.readouterr().out
    assert options(tmp_path)["peak_tflops"] == 0.08
    assert train.main([*argv, "--max-iters", "40", "--out-dir", str(tmp_path), "--resume", "--peak-tflops", "2"]) == 0
    out = capsys.readouterr().out
    assert "--peak-tflops 0.08 → 2.0" in out and "; peak 2,000.0 GFLOP/s for MFU (--peak-tflops)\n" in out


def mfu_figures(out):
    return [line.rsplit("mfu ", 1)[1] for line in out.splitlines() if line.startswith("iter ") and "mfu " in line]


def test_an_mfu_above_100_percent_is_never_printed(tmp_path, capsys, monkeypatch):
    """A peak measured while the machine was busy (here: 1 kFLOP/s) is measured again at once, and where that is
    still below the step's rate, the line says so instead of a utilisation over 100 %."""
    at = TINY.index("--peak-tflops")
    argv = [*TINY[:at], *TINY[at + 2:], "--log-interval", "1", "--max-iters", "4", "--eval-interval", "2"]
    monkeypatch.setattr(train, "measure_peak_flops", measured(1e3))
    assert train.main([*argv, "--out-dir", str(tmp_path / "a")]) == 0
    assert mfu_figures(capsys.readouterr().out) == ["n/a (faster than the peak measured)"] * 4
    monkeypatch.setattr(train, "measure_peak_flops", measured(1e3, 1e15))  # the second measurement is right
    assert train.main([*argv, "--out-dir", str(tmp_path / "b")]) == 0
    figures = mfu_figures(capsys.readouterr().out)
    assert len(figures) == 4 and all(re.fullmatch(r"\d+\.\d%", f) and float(f[:-1]) <= 100 for f in figures)
    assert train.main([*argv, "--out-dir", str(tmp_path / "c"), "--peak-tflops", "1e-9"]) == 0
    assert mfu_figures(capsys.readouterr().out) == ["n/a (faster than the peak --peak-tflops gives)"] * 4


def test_the_peak_is_the_fastest_matmul_after_the_warm_up(monkeypatch):
    durations = [1.0, 1.5] + [4.0, 2.0, 3.0, 2.5, 8.0, 2.0, 5.0, 6.0]  # 2 warm-up runs (fast: ignored), 8 timed
    reads, now = [0.0], 0.0  # the start of the measurement, then each run's start and end, then the last check
    for seconds in durations:
        reads += [now, now + seconds]
        now += seconds
    reads.append(now)
    clock = iter(reads)
    monkeypatch.setattr(train.time, "perf_counter", lambda: next(clock))
    assert train.measure_peak_flops("cpu", n=8, seconds=20.0) == 2 * 8 ** 3 / 2.0  # 8 runs took 32.5 s > 20 s
    assert next(clock, None) is None  # and it stopped there


def test_fine_tuning_a_char_model_on_text_with_new_characters_says_what_can_be_done(tmp_path, capsys):
    assert run(capsys, "--max-iters", "2", "--out-dir", str(tmp_path / "o"))[0] == 0
    data = tmp_path / "new.txt"
    data.write_text("½ ⅓ ¼ ⅕ ⅙ ⅛ ⅔ ¾ ⅜ ⅝ ⅞ and so on " * 20, encoding="utf-8")
    # and before a weight is read: it was refused only once the weights had loaded, so damaged ones were reported
    (tmp_path / "o" / "model.safetensors").write_bytes(b"not safetensors")
    code, out, err = run(capsys, "--max-iters", "2", "--init-from", str(tmp_path / "o"), "--data", str(data),
                         "--out-dir", str(tmp_path / "tuned"))
    assert code == 1
    assert err == (f"train: error: the data has 11 characters that the model in {tmp_path / 'o'} has no token for "
                   "('¼', '½', '¾', '⅓', '⅔', '⅕', '⅙', '⅛', '⅜', '⅝', …): its 65 characters are fixed with its "
                   "weights. Train a new model on this text (without --resume or --init-from), or remove or replace "
                   "those characters in the data\n")
    assert not (tmp_path / "tuned").exists()


def test_init_from_without_block_size_takes_the_models_own_context(tmp_path, capsys):
    """The default --block-size, 64, is the main job's: a model of 32 positions was refused for an option the user
    never gave."""
    root = random_gpt2_folder(tmp_path, "to be or not to be " * 20, n_layer=1)
    code = train.main(["--init-from", str(root / "base"), "--data", str(root / "text.txt"), "--max-iters", "1",
                       "--eval-iters", "1", "--batch-size", "2", "--sample-tokens", "0", "--no-progress",
                       "--out-dir", str(tmp_path / "o")])
    assert code in (0, None)
    assert "block 32," in capsys.readouterr().out
    assert json.loads((tmp_path / "o" / "config.json").read_text())["n_positions"] == 32


def test_a_block_size_beyond_the_init_from_models_positions_is_refused_at_parse_time(tmp_path, capsys, monkeypatch):
    """It was refused only after the weights and the text had loaded (3.7 s for GPT-2 small), with no fix named."""
    base = random_gpt2_folder(tmp_path, "to be or not to be " * 20, n_layer=1) / "base"
    monkeypatch.setattr(train, "load_text", lambda *a: pytest.fail("the text was read before the refusal"))
    with pytest.raises(SystemExit) as exit_info:
        train.main(["--init-from", str(base), "--block-size", "64", "--out-dir", str(tmp_path / "o")])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (f"python -m models.train: error: --block-size 64 exceeds the 32 positions of "
                                       f"the model in --init-from {base}; use --block-size 32 or less (see --help)\n")


@pytest.mark.parametrize("eval_only", [[], ["--eval-only"]], ids=["resume", "eval-only"])
def test_a_block_size_beyond_the_checkpoints_model_is_refused_on_resume_before_a_weight_is_read(tmp_path, capsys,
                                                                                             eval_only):
    """The bound is in the checkpoint's config.json; it was read from the loaded model, so a damaged weights file
    was reported instead of the option, and a sound one took its load time (seconds for GPT-2) to be refused."""
    out = tmp_path / "o"
    assert run(capsys, "--max-iters", "1", "--out-dir", str(out))[0] == 0
    (out / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(SystemExit) as exit_info:
        train.main([*(eval_only or ["--resume"]), "--block-size", "32", "--out-dir", str(out)])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == (f"python -m models.train: error: --block-size 32 exceeds the block_size 16 of "
                                       f"the checkpoint's model in {out}, which it fixes; resume with --block-size "
                                       "16 or less (see --help)\n")


def test_mfu_counts_the_products_of_the_non_embedding_weights_and_the_attention():
    """PaLM's 6N + 12·L·H·Q·T by hand: N is every parameter but the position table (wpe, a look-up), which the
    count included (about 1 % of the default model); wte counts, as the LM head's product it is tied to."""
    from models.gpt.gpt2 import GPT, GPTConfig
    V, T, L, C = 65, 32, 2, 16
    model = GPT(GPTConfig(vocab_size=V, block_size=T, n_layer=L, n_head=2, n_embd=C))
    block = 2 * C + (C * 3 * C + 3 * C) + (C * C + C) + 2 * C + (C * 4 * C + 4 * C) + (4 * C * C + C)
    n = V * C + L * block + 2 * C  # wte, the blocks (ln_1, c_attn, c_proj, ln_2, c_fc, c_proj), ln_f
    assert n == 7632 == model.num_parameters() - T * C
    assert train.flops_per_token(model, T) == 6 * 7632 + 12 * L * C * T == 58080
    assert train.flops_per_token(model, 8) == 6 * 7632 + 12 * L * C * 8  # attention over the positions trained


def test_mfu_counts_no_weight_gradient_for_a_frozen_base():
    """A LoRA run counted 6N FLOPs a token, its frozen weights' gradients included: about 1.5 times its work, so
    the log said "mfu n/a (faster than the peak measured)" of a peak that was right."""
    import nn
    from models.gpt.gpt2 import GPT, GPTConfig
    model = GPT(GPTConfig(vocab_size=65, block_size=32, n_layer=2, n_head=2, n_embd=16))
    nn.lora(model, 2, 4, ["c_attn"])
    adapters = model.num_parameters(trainable=True)
    assert adapters == 2 * (16 * 2 + 2 * 48)
    # the frozen non-embedding weights (7632, test above) 4 FLOPs each, the adapters 6
    assert train.flops_per_token(model, 32) == 4 * 7632 + 6 * adapters + 12 * 2 * 16 * 32


def test_eval_only_of_a_fine_tuned_checkpoint_names_the_checkpoint_not_its_base(tmp_path, capsys):
    """The checkpoint's saved options hold its --init-from, and the line named that base for the tuned weights."""
    root = random_gpt2_folder(tmp_path, "to be or not to be " * 20, n_layer=1)
    tuned = tmp_path / "tuned"
    assert train.main(["--init-from", str(root / "base"), "--data", str(root / "text.txt"), "--max-iters", "2",
                       "--eval-iters", "1", "--batch-size", "2", "--sample-tokens", "0", "--no-progress",
                       "--always-save", "--out-dir", str(tuned)]) == 0
    capsys.readouterr()
    assert train.main(["--eval-only", "--out-dir", str(tuned)]) == 0
    assert capsys.readouterr().out.startswith(f"eval-only: the checkpoint in {tuned} (iteration 2): train loss ")


def test_a_saved_switch_can_be_turned_off_on_resume(tmp_path, capsys):
    folder = tmp_path / "o"
    assert run(capsys, "--max-iters", "2", "--always-save", "--checkpoint-blocks", "--out-dir", str(folder))[0] == 0
    assert options(folder)["always_save"] and options(folder)["checkpoint_blocks"]
    assert train.main(["--resume", "--max-iters", "4", "--no-always-save", "--no-checkpoint-blocks", "--out-dir",
                       str(folder)]) == 0
    assert not options(folder)["always_save"] and not options(folder)["checkpoint_blocks"]


def test_a_saved_lr_decay_iters_can_be_given_back_its_default_on_resume(tmp_path, capsys):
    folder = tmp_path / "o"
    assert run(capsys, "--max-iters", "2", "--lr-decay-iters", "50", "--out-dir", str(folder))[0] == 0
    assert options(folder)["lr_decay_iters"] == 50
    assert train.main(["--resume", "--max-iters", "4", "--lr-decay-iters", "none", "--always-save", "--out-dir",
                       str(folder)]) == 0
    assert options(folder)["lr_decay_iters"] is None
    with pytest.raises(SystemExit):
        train.main(["--lr-decay-iters", "0", "--out-dir", str(tmp_path / "p")])
