"""python -m models.sample: every option checked before the model loads, every failure one line."""
import os
import shutil
import sys

import pytest

from models.training import checkpoint, sample, train


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sample") / "out"
    data = folder.parent / "data.txt"
    data.write_text("abcab cabca bcabc\n" * 50, encoding="utf-8")
    assert train.main(["--data", str(data), "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size",
                       "16", "--batch-size", "2", "--max-iters", "2", "--eval-iters", "1", "--peak-tflops", "1",
                       "--no-progress", "--sample-tokens", "0", "--out-dir", str(folder)]) == 0
    return folder


@pytest.mark.parametrize("argv, message", [
    (["--temperature", "-1"], "argument --temperature: must be in [0, inf), got -1"),
    (["--temperature", "nan"], "argument --temperature: must be in [0, inf), got nan"),
    (["--top-k", "0"], "argument --top-k: must be in [1, inf), got 0"),
    (["--top-k", "2.5"], "argument --top-k: expected an integer in [1, inf), got '2.5'"),
    (["--top-p", "1.5"], "argument --top-p: must be in (0, 1], got 1.5"),
    (["--top-p", "0"], "argument --top-p: must be in (0, 1], got 0"),
    (["--max-new-tokens", "-3"], "argument --max-new-tokens: must be in [0, inf), got -3"),
    (["--num-samples", "0"], "argument --num-samples: must be in [1, inf), got 0"),
    (["--seed", "-1"], "argument --seed: must be in [0, 4294967295], got -1"),
    (["--device", "gpu"], "argument --device: must be one of cpu, cuda, got 'gpu'"),
    (["--prompt", ""], "--prompt is empty; give it some text to continue"),  # said once the model had loaded
    # argparse reads a value that starts with "-" as an option, and said only "expected one argument"
    (["--prompt", "-x"], "argument --prompt: expected one argument; '-x' starts with '-', so it was read as an "
     "option: write --prompt=-x to give it as the value"),
    (["--temperature", "-inf"], "argument --temperature: must be in [0, inf), got -inf"),  # a number: a value
    (["--prompt", "--max-new-tokens", "3"], "argument --prompt: expected one argument"),  # a value left out
    (["--temperature=-inf"], "argument --temperature: must be in [0, inf), got -inf"),
])
def test_bad_options_are_one_line(trained, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        sample.main([str(trained), *argv])  # refused before the model loads
    err = capsys.readouterr().err
    assert exit_info.value.code == 2
    assert err == f"python -m models.sample: error: {message} (see --help)\n"


def test_edge_values_sample(trained, capsys):
    argv = [str(trained), "--prompt", "a", "--max-new-tokens", "4", "--top-k", "1", "--top-p", "1", "--seed", "0"]
    assert sample.main(argv) == 0
    greedy = capsys.readouterr().out
    assert sample.main([*argv[:-6], "--temperature", "0"]) == 0
    assert capsys.readouterr().out == greedy  # top_k=1 is greedy decoding
    assert sample.main([str(trained), "--prompt", "a", "--max-new-tokens", "0"]) == 0
    assert capsys.readouterr().out == "a\n"


def test_logits_that_overflow_are_one_line_naming_the_token(trained, tmp_path):
    """Finite weights too large for float32 (the loader refuses NaN and inf ones) printed the prompt and newlines,
    token 0 at every step, after NumPy's overflow warnings, with exit status 0."""
    import subprocess
    model, _ = checkpoint.load_model(trained)
    ln_f = model.transformer.ln_f
    ln_f.weight.data[...], ln_f.bias.data[...] = 3e38, 3e38
    shutil.copytree(trained, tmp_path / "big")
    model.save_pretrained(tmp_path / "big")
    done = subprocess.run([sys.executable, "-m", "models.sample", str(tmp_path / "big"), "--prompt", "ab",
                           "--max-new-tokens", "5"], capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == (
        "sample: error: generate: the logits for new token 1 (position 2) hold NaN or inf, so no token can be "
        "drawn: the weights are finite but as large as 3e+38, and the forward overflowed float32 with them, as a "
        "diverged run leaves them; load another checkpoint (docs/debugging.md: --detect-anomaly and "
        "--health-interval show where a run goes wrong)\n")


@pytest.mark.parametrize("prompt, message", [
    ("a€", "CharTokenizer.encode: character '€' (U+20AC, first at index 1) is not in this tokenizer's "),
    ("a€", "the characters of the text it was built from: leave it out (a prompt), or build the tokenizer"),
])
def test_a_prompt_the_tokenizer_cannot_take_is_one_line(trained, capsys, prompt, message):
    assert sample.main([str(trained), "--prompt", prompt]) == 1
    err = capsys.readouterr().err
    assert err.startswith("sample: error: ") and message in err and err.count("\n") == 1


def test_a_prompt_the_tokenizer_cannot_take_is_refused_before_a_weight_is_read(trained, tmp_path, capsys):
    """The prompt was encoded with the tokenizer that came with the loaded model: a damaged weights file was reported
    instead, and sound weights (seconds for GPT-2) loaded first."""
    shutil.copytree(trained, tmp_path / "out")
    (tmp_path / "out" / "model.safetensors").write_bytes(b"not safetensors")
    assert sample.main([str(tmp_path / "out"), "--prompt", "a€"]) == 1
    assert capsys.readouterr().err.startswith("sample: error: CharTokenizer.encode: character '€' (U+20AC, first at "
                                              "index 1) is not in this tokenizer's 5-character vocabulary")


def test_the_default_prompt_a_vocabulary_without_a_newline_lacks_is_named_as_the_default(tmp_path, capsys):
    """It said the newline "is not in this tokenizer's vocabulary …: leave it out (a prompt)", of a prompt the
    user never gave."""
    data = tmp_path / "data.txt"
    data.write_text("abcab cabca bcabc " * 50, encoding="utf-8")
    assert train.main(["--data", str(data), "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
                       "--batch-size", "2", "--max-iters", "1", "--eval-iters", "1", "--peak-tflops", "1",
                       "--no-progress", "--sample-tokens", "0", "--out-dir", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    assert sample.main([str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err == (f"sample: error: the default prompt, a newline, is not in the vocabulary of the "
                                       f"model in {tmp_path / 'out'} (its text had none); give --prompt, text of its "
                                       "characters\n")
    assert sample.main([str(tmp_path / "out"), "--prompt", "ab", "--max-new-tokens", "3"]) == 0


@pytest.mark.parametrize("name, message", [
    ("notes", "no checkpoint in {folder}: expected config.json and model.safetensors (train one with "
              "`python -m models.train`)"),
    ("missing", "no folder {folder} (train one with `python -m models.train --out-dir {folder}`)"),
    ("", "expected a path, got ''"),
])
def test_a_folder_without_a_checkpoint_is_refused_as_the_command_line_is_read(tmp_path, capsys, name, message):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "notes.txt").write_text("x")
    folder = str(tmp_path / name) if name else ""
    with pytest.raises(SystemExit) as exit_info:
        sample.main([folder])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == ("python -m models.sample: error: argument checkpoint: "
                                       f"{message.format(folder=folder)} (see --help)\n")


def test_a_prompt_file_is_continued_as_its_text_would_be(trained, tmp_path, capsys):
    path = tmp_path / "prompt.txt"
    path.write_text("abc\nab", encoding="utf-8")
    options = ["--max-new-tokens", "5", "--seed", "2"]
    assert sample.main([str(trained), "--prompt-file", str(path), *options]) == 0
    from_file = capsys.readouterr().out
    assert sample.main([str(trained), "--prompt", "abc\nab", *options]) == 0
    assert from_file == capsys.readouterr().out and from_file.startswith("abc\nab") and len(from_file) == 6 + 5 + 1


@pytest.mark.parametrize("argv, message", [
    (["--prompt", "a", "--prompt-file", "{file}"], "argument --prompt-file: not allowed with argument --prompt"),
    (["--prompt-file", "{missing}"], "argument --prompt-file: no file {missing}"),
])
def test_prompt_file_is_checked_at_parse_time(trained, tmp_path, capsys, argv, message):
    (tmp_path / "p.txt").write_text("a")
    names = {"file": tmp_path / "p.txt", "missing": tmp_path / "none.txt"}
    with pytest.raises(SystemExit) as exit_info:
        sample.main([str(trained), *(a.format(**names) for a in argv)])  # refused before the model loads
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"python -m models.sample: error: {message.format(**names)} (see --help)\n"


def test_a_prompt_file_that_is_not_utf8_is_one_line(trained, tmp_path, capsys):
    path = tmp_path / "latin1.txt"
    path.write_bytes(b"caf\xe9")
    assert sample.main([str(trained), "--prompt-file", str(path)]) == 1
    assert capsys.readouterr().err == (f"sample: error: --prompt-file {path} is not UTF-8 text (byte 0xe9 at "
                                       "offset 3); convert it first from its encoding, e.g. `iconv -f latin1 -t utf-8 FILE > NEW.txt` "
                                       "(or cp1252, shift-jis, ...)\n")


def test_an_empty_prompt_file_is_named_as_the_option(trained, tmp_path, capsys):
    """It was refused as "data file p.txt is empty", a name the command line never gave it."""
    path = tmp_path / "p.txt"
    path.write_text("")
    assert sample.main([str(trained), "--prompt-file", str(path)]) == 1
    assert capsys.readouterr().err == f"sample: error: --prompt-file {path} is empty; give it some text\n"


@pytest.mark.parametrize("temperature", ["1e-320", "5e-324", "1e-300"])
def test_a_temperature_too_small_to_divide_by_samples_as_greedy_as_generate_does(trained, capsys, temperature):
    argv = [str(trained), "--prompt", "ab", "--max-new-tokens", "12", "--seed", "3"]
    assert sample.main([*argv, "--temperature", "0"]) == 0
    greedy = capsys.readouterr().out
    assert sample.main([*argv, "--temperature", temperature]) == 0
    assert capsys.readouterr().out == greedy
    assert greedy != "ab" + "\n" * 12 + "\n"  # not token 0 of the vocabulary ("\n") every time, as before


def test_a_gpt2_name_with_no_folder_here_says_how_to_fetch_it(tmp_path, capsys, monkeypatch):
    """It said to train one with models.train, which does not give you GPT-2."""
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        sample.main(["gpt2-medium"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("python -m models.sample: error: argument checkpoint: no folder gpt2-medium; nothing is "
                          "downloaded here, so on a machine with internet run `hf download "
                          "openai-community/gpt2-medium") and err.count("\n") == 1


def test_a_prompt_of_bytes_that_are_not_utf8_is_refused_at_parse_time(trained, capsys):
    """A shell passes them as lone surrogates, which GPT-2's byte encoder met as a bare UnicodeEncodeError."""
    with pytest.raises(SystemExit) as exit_:
        sample.main([str(trained), "--prompt", "ab\udcff"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("python -m models.sample: error: --prompt holds bytes that are not UTF-8 (at "
                                       "byte 2); pass UTF-8 text, or put the text in a file and convert it "
                                       "(iconv -t utf-8) for --prompt-file (see --help)\n")


def test_a_utf8_prompt_under_the_c_locale_and_a_closed_pipe(trained, tmp_path):
    """Under LC_ALL=C (no UTF-8 mode) Python keeps argv's UTF-8 bytes as surrogates, which were refused as "not
    UTF-8"; an ASCII stdout failed on the first non-ASCII character after the work was done; `| head` closing the
    pipe was an error."""
    import subprocess
    data = tmp_path / "café.txt"
    data.write_text("un café, deux cafés\n" * 40, encoding="utf-8")
    assert train.main(["--data", str(data), "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16",
                       "--batch-size", "2", "--max-iters", "1", "--eval-iters", "1", "--peak-tflops", "1",
                       "--no-progress", "--sample-tokens", "0", "--out-dir", str(tmp_path / "out")]) == 0
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([sys.executable, "-m", "models.sample", str(tmp_path / "out"), "--prompt", "café".encode(),
                           "--max-new-tokens", "0"], env=env, capture_output=True)
    assert (done.returncode, done.stdout, done.stderr) == (0, b"caf\\xe9\n", b"")  # read whole, written escaped
    reader = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.buffer.read(1)"], stdin=subprocess.PIPE)
    done = subprocess.run([sys.executable, "-m", "models.sample", str(trained), "--prompt", "a", "--num-samples",
                           "200", "--max-new-tokens", "50"], stdout=reader.stdin, stderr=subprocess.PIPE)
    reader.wait(60)
    assert done.returncode == 0 and done.stderr == b""


def test_a_checkpoint_caught_between_a_saves_two_renames_is_sampled_from_as_load_model_reads_it(trained, tmp_path,
                                                                                                 capsys):
    """The folder is away (.out.prev) for a moment of a save without an atomic exchange; load_model reads it there,
    and the command line's check refused it: 'no folder out'."""
    import shutil
    shutil.copytree(trained, tmp_path / ".out.prev")
    assert sample.main([str(tmp_path / "out"), "--prompt", "ab", "--max-new-tokens", "3"]) == 0
    assert capsys.readouterr().out.startswith("ab")
