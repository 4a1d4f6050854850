"""Untrusted corpora, checkpoints and flags: probes of what a new user (or a careless script) may hand the
commands. Every case ends in one line naming the file, field or flag at fault, never a traceback, a hang or a
silent wrong result, and no command writes into another's folder."""
import json
import os
import signal
import stat
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

import numpy as np
import pytest

import autograd as ag
from models.training import checkpoint, export_merged, prepare, sample, train
from models.training import eval as evaluate
from models.training.shards import HEADER, MAGIC, PreparedData, ShardError
from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.tokenizer import CharTokenizer
from tests.models.conftest import random_gpt2_folder

ROOT = Path(__file__).resolve().parents[2]
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
        "--eval-interval", "2", "--eval-iters", "1", "--warmup-iters", "1", "--lr-decay-iters", "4",
        "--peak-tflops", "1", "--no-progress", "--sample-tokens", "0"]
TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\nAll:\nSpeak, speak.\n" * 40
INTERNALS = ("Traceback", "KeyError", "IndexError", "TypeError", "not iterable", "invalid data_path value",
             "not enough values to unpack", "BrokenPipeError")


def one_line(err):
    """The error output is one line without Python's or NumPy's internals; that line."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert not any(word in err for word in INTERNALS), err
    return lines[0]


def run(main, capsys, *argv):
    """main(argv)'s exit status (a parser's SystemExit included) and its stdout and stderr."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code
    out, err = capsys.readouterr()
    return code, out, err


def subprocess_run(args, timeout=60):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A text, its character shards (three train shards of 1000 tokens and more), and a one-iteration checkpoint."""
    root = tmp_path_factory.mktemp("untrusted")
    (root / "text.txt").write_text(TEXT * 2, encoding="utf-8")
    assert prepare.main([str(root / "text.txt"), "--out", str(root / "data"), "--tokenizer", "char",
                         "--shard-tokens", "1000", "--workers", "1", "--no-progress"]) == 0
    assert train.main([*TINY, "--data", str(root / "data"), "--max-iters", "2", "--out-dir", str(root / "run")]) == 0
    return root


@pytest.fixture
def data(made, tmp_path):
    """A fresh copy of the prepared folder, to damage."""
    folder = tmp_path / "data"
    folder.mkdir()
    for path in (made / "data").iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    return folder


def edit_meta(folder, change):
    meta = json.loads((folder / "meta.json").read_text())
    change(meta)
    (folder / "meta.json").write_text(json.dumps(meta))


def rewrite_shard(path, tokens, itemsize=2):
    """A shard whose header agrees with its tokens: well-formed, but not what meta.json lists."""
    tokens = np.asarray(tokens, dtype=f"<u{itemsize}")
    path.write_bytes(HEADER.pack(MAGIC, 1, itemsize, len(tokens), zlib.crc32(tokens), 0) + tokens.tobytes())


def train_on(capsys, folder, out):
    return run(train.main, capsys, *TINY, "--data", str(folder), "--max-iters", "2", "--out-dir", str(out))


def eval_on(capsys, made, folder):
    return run(evaluate.main, capsys, str(made / "run"), "--data", str(folder), "--split", "train", "--no-progress")


# --- shards are checked before they are used ---------------------------------------------------------------


def swap(folder):
    a, b = folder / "train_000000.bin", folder / "train_000001.bin"
    first = a.read_bytes()
    a.write_bytes(b.read_bytes())
    b.write_bytes(first)


def list_twice(folder):
    edit_meta(folder, lambda meta: meta["splits"]["train"]["shards"].__setitem__(
        1, dict(meta["splits"]["train"]["shards"][0])))


def flip_token(folder):
    path = folder / "train_000001.bin"
    raw = bytearray(path.read_bytes())
    raw[HEADER.size + 10] ^= 1
    path.write_bytes(bytes(raw))


def rewritten(folder):
    path = folder / "train_000000.bin"
    tokens = np.frombuffer(path.read_bytes()[HEADER.size:], "<u2").copy()
    tokens[5] = (tokens[5] + 1) % 3
    rewrite_shard(path, tokens)


DAMAGE = {"swapped": (swap, "train_000000.bin"), "listed twice": (list_twice, "train_000000.bin"),
          "flipped token": (flip_token, "train_000001.bin"), "rewritten whole": (rewritten, "train_000000.bin")}


@pytest.mark.parametrize("how", DAMAGE)
def test_shards_that_disagree_with_meta_are_refused_by_train(made, data, tmp_path, capsys, how):
    damage, name = DAMAGE[how]
    damage(data)
    code, _, err = train_on(capsys, data, tmp_path / "o")
    assert code in (1, 2) and name in one_line(err)
    assert not (tmp_path / "o" / "train_state.json").exists()


@pytest.mark.parametrize("how", DAMAGE)
def test_shards_that_disagree_with_meta_are_refused_by_eval(made, data, capsys, how):
    damage, name = DAMAGE[how]
    damage(data)
    code, _, err = eval_on(capsys, made, data)
    assert code in (1, 2) and name in one_line(err)


def test_shards_are_checked_lazily_not_read_whole_at_start(data, monkeypatch):
    """Opening reads headers only; a shard's tokens are checked when a batch first needs it, once."""
    from models.training import shards
    checked = []
    real = shards.check_tokens
    monkeypatch.setattr(shards, "check_tokens", lambda path, *rest: checked.append(path.name) or real(path, *rest))
    flip_token(data)
    prepared = PreparedData(data)  # no error yet: no shard's tokens were read
    assert checked == []
    rng = np.random.default_rng(0)
    prepared.splits["train"].verified.add(1)
    for _ in range(20):
        prepared.batch("train", 4, 8, rng)  # with shard 1 taken as checked, every batch is served
    others = sorted(p.name for p in data.glob("train_*.bin") if p.name != "train_000001.bin")
    assert sorted(checked) == others  # each other shard once, however many batches read it
    prepared.splits["train"].verified.discard(1)
    with pytest.raises(ShardError, match="train_000001.bin"):
        for _ in range(20):
            prepared.batch("train", 4, 8, rng)


def beyond_vocabulary(folder, index):
    """Train shard `index` with a token id past the vocabulary, its checksum made to match (header and meta.json):
    only the vocabulary check finds it. That id."""
    meta = json.loads((folder / "meta.json").read_text())
    path = folder / meta["splits"]["train"]["shards"][index]["name"]
    tokens = np.frombuffer(path.read_bytes()[HEADER.size:], "<u2").copy()
    tokens[3] = meta["vocab_size"] + 5
    rewrite_shard(path, tokens)
    edit_meta(folder, lambda meta: meta["splits"]["train"]["shards"][index].__setitem__("crc32", zlib.crc32(tokens)))
    return int(tokens[3])


def test_shards_token_ids_beyond_the_vocabulary_are_one_line_naming_the_file(made, data, tmp_path, capsys):
    beyond = beyond_vocabulary(data, 2)
    for code, _, err in (train_on(capsys, data, tmp_path / "o"), run(
            evaluate.main, capsys, str(made / "run"), "--data", str(data), "--split", "train", "--no-progress")):
        line = one_line(err)
        assert code == 1 and "train_000002.bin" in line and str(beyond) in line


@pytest.mark.parametrize("runner", ["train", "eval"])
def test_shards_a_fifo_in_place_of_a_shard_is_refused_without_hanging(made, data, tmp_path, runner):
    (data / "val_000000.bin").unlink()
    os.mkfifo(data / "val_000000.bin")
    args = ([*TINY, "--data", str(data), "--max-iters", "1", "--out-dir", str(tmp_path / "o")] if runner == "train"
            else [str(made / "run"), "--data", str(data), "--no-progress"])
    result = subprocess_run(["-m", f"models.{runner}", *args], timeout=60)
    assert result.returncode in (1, 2)
    assert "val_000000.bin" in one_line(result.stderr) and "regular file" in result.stderr


META_DAMAGE = {
    "not JSON": ("{not json", "not valid JSON"),
    "a list": ("[1, 2]", "should hold a JSON object"),
    "deep": ("[" * 100 + "]" * 100, "nests arrays or objects"),
    "splits an int": (lambda m: m.__setitem__("splits", 7), "'splits'"),
    "shards an int": (lambda m: m["splits"]["train"].__setitem__("shards", 3), "'splits.train.shards'"),
    "tokens a string": (lambda m: m["splits"]["val"]["shards"][0].__setitem__("tokens", "9"), "shards[0].tokens'"),
    "crc missing": (lambda m: m["splits"]["val"]["shards"][0].pop("crc32"), "shards[0].crc32'"),
    "name a path": (lambda m: m["splits"]["val"]["shards"][0].__setitem__("name", "../x.bin"), "shards[0].name'"),
    "name with a NUL": (lambda m: m["splits"]["val"]["shards"][0].__setitem__("name", "val\u0000.bin"),
                        "shards[0].name'"),  # it failed at the first stat as "embedded null byte" alone
    "vocab_size a string": (lambda m: m.__setitem__("vocab_size", "65"), "'vocab_size'"),
    "kind and vocab_size disagree": (lambda m: m.__setitem__("vocab_size", 50257), "vocab_size"),
    "tokenizer a list": (lambda m: m.__setitem__("tokenizer", []), "'tokenizer'"),
}


@pytest.mark.parametrize("how", META_DAMAGE)
def test_meta_that_is_damaged_is_one_line_naming_the_file_and_field(data, tmp_path, capsys, how):
    change, field = META_DAMAGE[how]
    if callable(change):
        edit_meta(data, change)
    else:
        (data / "meta.json").write_text(change)
    code, _, err = train_on(capsys, data, tmp_path / "o")
    line = one_line(err)
    assert code in (1, 2) and "meta.json" in line and field in line  # 1: the tokenizer is built after parsing


def test_meta_that_is_huge_is_refused_before_it_is_read(data, tmp_path, capsys):
    from models.io import MAX_JSON_BYTES
    with open(data / "meta.json", "r+b") as f:
        f.truncate(MAX_JSON_BYTES + 1)  # sparse: it takes no disk, and reading it would take seconds
    code, _, err = train_on(capsys, data, tmp_path / "o")
    line = one_line(err)
    assert code == 2 and "meta.json" in line and "bytes" in line


# --- prepare does not trust its progress, its inputs or its output folder ---------------------------------


@pytest.mark.parametrize("progress", [
    "[]", '{"plan": 1}', '{"shards": {"train": 5}}', '{"shards": {"train": [{"name": 3}], "val": []}}',
    '{"shards": {"train": [{"name": "train_000000.bin", "tokens": 5, "crc32": 1, "next": [1]}], "val": []}}',
])
def test_prepare_a_damaged_progress_file_is_one_line(made, tmp_path, capsys, progress):
    out = tmp_path / "p"
    out.mkdir()
    args = [str(made / "text.txt"), "--out", str(out), "--tokenizer", "char", "--shard-tokens", "1000",
            "--workers", "1"]
    plan = prepare.planned(prepare.make_parser().parse_args(args))
    saved = json.loads(progress)
    if isinstance(saved, dict) and "shards" in saved:
        saved = {"plan": plan, "tokenizer": {}, "sectioning": {}, **saved}
    (out / "prepare_progress.json").write_text(json.dumps(saved))
    code, _, err = run(prepare.main, capsys, *args, "--no-progress")
    line = one_line(err)
    assert code == 1 and "prepare_progress.json" in line


@pytest.mark.parametrize("source", ["/dev/zero", "/dev/null", "fifo"])
def test_prepare_a_device_or_fifo_as_input_is_refused_without_hanging(tmp_path, source):
    if source == "fifo":
        source = str(tmp_path / "fifo")
        os.mkfifo(source)
    result = subprocess_run(["-m", "models.prepare", source, "--out", str(tmp_path / "p"), "--no-progress"],
                            timeout=60)
    line = one_line(result.stderr)
    assert result.returncode in (1, 2) and source in line and "not a regular file" in line


def test_prepare_a_section_beyond_memory_is_refused_at_parse_time(tmp_path, capsys):
    (tmp_path / "x.txt").write_text("x")
    code, _, err = run(prepare.main, capsys, str(tmp_path / "x.txt"), "--out", str(tmp_path / "p"), "--section-kb",
                       str(10 ** 15))
    line = one_line(err)
    assert code == 2 and "--section-kb" in line and "memory" in line


MEMORY_ERROR = ("python -m models.prepare: error: --workers {} with --section-kb {} would hold about {} GiB at once "
                "(each worker's section as it is tokenized, about 18 times its size{}), more than half of this "
                "machine's 1.0 GiB of memory; give {} (see --help)")


@pytest.mark.parametrize("workers, kb, gib, ids, fixes", [
    # 64 x 18 MiB of sections being tokenized and 129 slots of (1 MiB + 64 KiB) x 2 bytes: 1.39 GiB
    (64, 1024, "1.4", ", and 129 sections of ids",
     "fewer --workers (at most 22 with --section-kb 1024) or a smaller --section-kb (at most 360 with --workers 64)"),
    (23, 1024, "0.5", ", and 47 sections of ids",
     "fewer --workers (at most 22 with --section-kb 1024) or a smaller --section-kb (at most 1020 with --workers 23)"),
    (64, 361, "0.5", ", and 129 sections of ids",
     "fewer --workers (at most 63 with --section-kb 361) or a smaller --section-kb (at most 360 with --workers 64)"),
    (1, 29128, "0.5", "", "a smaller --section-kb (at most 29127 with --workers 1)"),
])
def test_prepare_workers_and_sections_beyond_memory_are_refused_before_any_work(tmp_path, capsys, monkeypatch,
                                                                                 workers, kb, gib, ids, fixes):
    """2 x workers + 1 sections' ids share one buffer, and each worker tokenizes a section of its own: a pool
    whose buffer mmap could not allocate failed with a bare '[Errno 12] Cannot allocate memory' after reading
    the corpus, and 1024 workers forked with a 4.3 GiB buffer. Refused by name before a file is read."""
    monkeypatch.setattr(prepare, "machine_memory", lambda: 2 ** 30)
    (tmp_path / "x.txt").write_text("x")
    code, _, err = run(prepare.main, capsys, str(tmp_path / "x.txt"), "--out", str(tmp_path / "p"),
                       "--workers", str(workers), "--section-kb", str(kb))
    assert code == 2 and one_line(err) == MEMORY_ERROR.format(workers, kb, gib, ids, fixes)
    assert not (tmp_path / "p").exists()


def test_prepare_workers_and_sections_that_fit_only_together_say_so(tmp_path, capsys, monkeypatch):
    """Where neither fewer workers alone nor a smaller section alone fits, the line ended "; give " and nothing."""
    monkeypatch.setattr(prepare, "machine_memory", lambda: 2 ** 29)
    (tmp_path / "x.txt").write_text("x")
    code, _, err = run(prepare.main, capsys, str(tmp_path / "x.txt"), "--out", str(tmp_path / "p"),
                       "--workers", "1024", "--section-kb", "1000000")
    assert code == 2 and one_line(err) == MEMORY_ERROR.replace("1.0 GiB", "0.5 GiB").format(
        1024, 1000000, "21486.5", ", and 2049 sections of ids",
        "fewer --workers and a smaller --section-kb together (at most 14563 with --workers 1)")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("workers, kb", [(22, 1024), (64, 360), (1, 29127)])
def test_prepare_workers_and_sections_that_fit_memory_go_on_to_the_work(tmp_path, capsys, monkeypatch, workers, kb):
    """The largest settings the refusal offers pass it: the run goes on to look in its input (a folder of no text)."""
    monkeypatch.setattr(prepare, "machine_memory", lambda: 2 ** 30)
    (tmp_path / "empty").mkdir()
    code, _, err = run(prepare.main, capsys, str(tmp_path / "empty"), "--out", str(tmp_path / "p"),
                       "--workers", str(workers), "--section-kb", str(kb))
    assert code == 1 and one_line(err) == (f"prepare: error: {tmp_path / 'empty'} holds no file matching '*.txt' "
                                           "(see --pattern)")


def test_prepare_defaults_fit_this_machines_memory():
    """Every core as workers (more than the cores is allowed) and 1 MB sections pass on this machine."""
    args = prepare.make_parser().parse_args([__file__, "--out", "out"])
    prepare.check_fits_memory(args.workers, args.section_kb)
    prepare.check_fits_memory(4 * os.cpu_count(), args.section_kb)


@pytest.mark.parametrize("where", ["run", "run/sub"])
def test_prepare_into_a_training_checkpoints_folder_is_refused(made, capsys, where):
    before = sorted(p.name for p in (made / "run").iterdir())
    code, _, err = run(prepare.main, capsys, str(made / "text.txt"), "--out", str(made / where), "--tokenizer", "char")
    line = one_line(err)
    assert code == 2 and "checkpoint" in line
    assert sorted(p.name for p in (made / "run").iterdir()) == before


@pytest.mark.parametrize("how", ["missing", "flipped token", "truncated", "token beyond the vocabulary"])
def test_prepare_again_redoes_a_finished_folder_whose_shard_train_refused(made, tmp_path, capsys, how):
    """train said "prepare the folder again", and prepare said "already holds this corpus" and did nothing
    (a token beyond the vocabulary, which prepare's own check of the shards did not look for, still did)."""
    out = tmp_path / "p"
    args = [str(made / "text.txt"), "--out", str(out), "--tokenizer", "char", "--shard-tokens", "1000",
            "--workers", "1", "--no-progress"]
    assert prepare.main(args) == 0
    whole = {p.name: p.read_bytes() for p in out.iterdir()}
    shard = out / "train_000001.bin"
    if how == "missing":
        shard.unlink()
    elif how == "truncated":
        shard.write_bytes(whole[shard.name][:-2])
    elif how == "flipped token":
        flip_token(out)
    else:
        beyond_vocabulary(out, 1)
    code, _, err = train_on(capsys, out, tmp_path / "o")
    assert code == 1 and "train_000001.bin" in one_line(err) and "prepare" in err
    code, line, err = run(prepare.main, capsys, *args)
    assert code == 0 and not err and "prepared afresh, since" in line and str(shard) in line, (line, err)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == whole
    code, line, _ = run(prepare.main, capsys, *args)
    assert code == 0 and "already holds this corpus" in line
    assert train_on(capsys, out, tmp_path / "o")[0] == 0


@pytest.mark.parametrize("pattern", ["/etc/*.txt", "../*.txt", ""])
def test_prepare_a_pattern_that_is_not_under_the_folder_is_refused_at_parse_time(made, tmp_path, capsys, pattern):
    """An absolute one was a NotImplementedError traceback from pathlib."""
    code, _, err = run(prepare.main, capsys, str(made), "--pattern", pattern, "--out", str(tmp_path / "p"))
    line = one_line(err)
    assert code == 2 and "--pattern" in line and "'*.txt'" in line
    assert not (tmp_path / "p").exists()


def test_train_on_a_folder_prepared_with_no_val_split_names_the_option(made, tmp_path, capsys):
    """prepare suggests --val-fraction 0 for none, and train said to use more text or a smaller --block-size."""
    assert prepare.main([str(made / "text.txt"), "--out", str(tmp_path / "p"), "--tokenizer", "char",
                         "--val-fraction", "0", "--workers", "1", "--no-progress"]) == 0
    code, _, err = train_on(capsys, tmp_path / "p", tmp_path / "o")
    line = one_line(err)
    assert code == 1 and "no val tokens" in line and "--val-fraction above 0" in line and "--block-size" not in line
    assert run(evaluate.main, capsys, str(made / "run"), "--data", str(tmp_path / "p"), "--split", "train",
               "--no-progress")[0] == 0  # the folder is still good for what it holds


TEXT_IN = {  # how the text is written, what iconv -f must name, whether the NUL is what gives it away
    "utf-16 with its mark": (lambda t: t.encode("utf-16"), "utf-16"),
    "utf-32 with its mark": (lambda t: t.encode("utf-32"), "utf-32"),
    "utf-16le, no mark": (lambda t: t.encode("utf-16-le"), "utf-16le"),
    "latin-1": (lambda t: t.encode("latin-1"), "latin1"),
}


@pytest.mark.parametrize("how", TEXT_IN)
@pytest.mark.parametrize("command", ["prepare", "train"])
def test_text_not_in_utf8_is_refused_with_an_iconv_command_that_converts_it(tmp_path, capsys, how, command):
    """`iconv -t utf-8` alone converts from the locale's charset, UTF-8 here, and fails on the very bytes refused;
    UTF-16 of ASCII text without its mark is valid UTF-8 (a NUL after each character) and was prepared as it."""
    import re
    text = TEXT.replace("Citizen", "Citoyen café")
    encode, encoding = TEXT_IN[how]
    source = tmp_path / "t.txt"
    source.write_bytes(encode(text))
    if command == "prepare":
        code, _, err = run(prepare.main, capsys, str(source), "--out", str(tmp_path / "p"), "--tokenizer", "char",
                           "--workers", "1", "--no-progress")
    else:
        code, _, err = train_on(capsys, source, tmp_path / "o")
    line = one_line(err)
    assert code == 1 and str(source) in line and "not UTF-8 text" in line
    named = re.search(r"`iconv -f (\S+) -t utf-8 ", line).group(1)
    assert named == encoding and source.read_bytes().decode(named).lstrip("\ufeff") == text
    assert not (tmp_path / "p").exists() and not (tmp_path / "o").exists()


@pytest.mark.parametrize("size", [5_000, 300_000])
def test_prepare_a_binary_file_that_decodes_as_utf8_is_refused_as_binary(tmp_path, capsys, size):
    """Zeros are valid UTF-8: --val-fraction 0 prepared them as text, and otherwise the corpus was "too small" or
    had "no line break" to cut a val split at."""
    (tmp_path / "zeros.txt").write_bytes(bytes(size))
    for fraction in ("0.1", "0"):
        code, _, err = run(prepare.main, capsys, str(tmp_path / "zeros.txt"), "--out", str(tmp_path / "p"),
                           "--tokenizer", "char", "--val-fraction", fraction, "--workers", "1", "--no-progress")
        line = one_line(err)
        assert code == 1 and "zeros.txt is not UTF-8 text (a NUL byte at offset 0): it is binary" in line
        assert line.endswith("(UTF-8 text with stray NULs: `tr -d '\\000' < FILE > NEW.txt`)"), line
        assert not (tmp_path / "p").exists()


def test_prepare_killed_leaves_no_worker_tracebacks(tmp_path):
    big = tmp_path / "big.txt"
    big.write_text(("the king and the queen of it all, " * 40 + "\n") * 3000, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "models.prepare", str(big), "--out", str(tmp_path / "p"),
                             "--workers", "2", "--section-kb", "16", "--no-progress"], cwd=ROOT, env=env,
                            stderr=subprocess.PIPE, text=True)
    time.sleep(4)
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=30)  # the workers hold stderr open until they too are gone
    assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_prepare_and_data_file_read_crlf_text_alike(tmp_path, capsys):
    text = "ab\r\ncd\r\n" * 300
    (tmp_path / "crlf.txt").write_bytes(text.encode())
    assert prepare.main([str(tmp_path / "crlf.txt"), "--out", str(tmp_path / "p"), "--tokenizer", "char",
                         "--val-fraction", "0", "--workers", "1", "--no-progress"]) == 0
    prepared = PreparedData(tmp_path / "p")
    from models.training.data import load_text
    loaded = load_text(tmp_path / "crlf.txt")
    assert loaded == text
    assert prepared.tokenizer().vocab_size == CharTokenizer(loaded).vocab_size == 6
    assert len(prepared.splits["train"]) == len(loaded)


# --- LoRA flags, adapters and their checkpoints ---------------------------------------------------------


@pytest.fixture(scope="module")
def lora(tmp_path_factory):
    """A random GPT-2 folder with a character tokenizer, and a LoRA checkpoint of it."""
    root = random_gpt2_folder(tmp_path_factory.mktemp("lora"), TEXT, n_layer=1)
    assert train.main([*TINY, "--data", str(root / "text.txt"), "--init-from", str(root / "base"), "--lora-r", "2",
                       "--max-iters", "2", "--out-dir", str(root / "run")]) == 0
    return root


def copy_folder(source, target):
    target.mkdir()
    for path in source.iterdir():
        if path.is_file():
            (target / path.name).write_bytes(path.read_bytes())
    return target


@pytest.mark.parametrize("flags, needed", [
    (["--lora-targets", "c_attn"], "--lora-r"), (["--lora-alpha", "8"], "--lora-r"), (["--lora-r", "0"], "--lora-r"),
    # these two were refused only once the weights and the text had loaded
    (["--lora-r", "17"], "--lora-r 17 exceeds the width (n_embd 16) of the model in --init-from"),
    (["--lora-r", "2", "--lora-targets", "c_attn,c_atn"], "GPT-2 has no Linear layer named 'c_atn'; choose among "
                                                          "c_attn, c_proj, c_fc"),
])
def test_lora_flags_that_cannot_take_effect_are_refused(lora, tmp_path, capsys, flags, needed):
    code, _, err = run(train.main, capsys, *TINY, "--data", str(lora / "text.txt"), "--init-from",
                       str(lora / "base"), "--max-iters", "1", "--out-dir", str(tmp_path / "o"), *flags)
    line = one_line(err)
    assert code == 2 and needed in line
    assert not (tmp_path / "o").exists()


def test_lora_an_edited_adapter_config_is_refused_on_resume(lora, tmp_path, capsys):
    run_dir = copy_folder(lora / "run", tmp_path / "run")
    config = json.loads((run_dir / "adapter_config.json").read_text())
    (run_dir / "adapter_config.json").write_text(json.dumps({**config, "alpha": 64.0}, indent=2))
    code, _, err = run(train.main, capsys, *TINY, "--resume", "--max-iters", "4", "--out-dir", str(run_dir))
    line = one_line(err)
    assert code == 1 and "adapter_config.json" in line and "SHA-256" in line


def test_lora_an_edited_tokenizer_is_refused_on_resume(lora, tmp_path, capsys):
    run_dir = copy_folder(lora / "run", tmp_path / "run")
    path = run_dir / "gptgrad_tokenizer.json"
    path.write_text(path.read_text() + "\n")
    code, _, err = run(train.main, capsys, *TINY, "--resume", "--max-iters", "4", "--out-dir", str(run_dir))
    assert code == 1 and "gptgrad_tokenizer.json" in one_line(err)


def test_lora_nan_adapters_are_refused_by_sample(lora, tmp_path, capsys):
    from safetensors.numpy import load_file, save_file
    run_dir = copy_folder(lora / "run", tmp_path / "run")
    adapters = load_file(str(run_dir / "adapters.safetensors"))
    first = sorted(adapters)[0]
    adapters[first] = np.full_like(adapters[first], np.nan)
    save_file(adapters, str(run_dir / "adapters.safetensors"))
    code, out, err = run(sample.main, capsys, str(run_dir), "--max-new-tokens", "5")
    line = one_line(err)
    assert code == 1 and out == "" and "adapters.safetensors" in line and first in line


@pytest.mark.parametrize("edit, problem", [
    (lambda adapters, key: adapters.pop(key), "lacks ['{key}']: not the adapters"),  # it said "holds" the key it lacked
    (lambda adapters, key: adapters.update({"transformer.h.0.mlp.c_fc.lora_A": adapters[key]}),
     "holds ['transformer.h.0.mlp.c_fc.lora_A']: not the adapters"),
])
def test_lora_adapters_that_lack_or_add_a_key_are_refused_naming_it_as_what_it_is(lora, tmp_path, capsys, edit,
                                                                                    problem):
    from safetensors.numpy import load_file, save_file
    run_dir = copy_folder(lora / "run", tmp_path / "run")
    adapters = load_file(str(run_dir / "adapters.safetensors"))
    key = "transformer.h.0.attn.c_attn.lora_B"
    edit(adapters, key)
    save_file(adapters, str(run_dir / "adapters.safetensors"))
    code, out, err = run(sample.main, capsys, str(run_dir), "--max-new-tokens", "1")
    line = one_line(err)
    assert code == 1 and out == "" and f"adapters.safetensors {problem.format(key=key)}" in line
    assert "(rank 2 in c_attn); the two files come from different runs" in line


@pytest.mark.parametrize("inside", ["run/merged", "run/a/b"])
def test_lora_export_into_the_checkpoints_own_folder_is_refused(lora, capsys, inside):
    before = sorted(p.name for p in (lora / "run").iterdir())
    code, _, err = run(export_merged.main, capsys, str(lora / "run"), str(lora / inside))
    line = one_line(err)
    assert code == 2 and "checkpoint" in line
    assert sorted(p.name for p in (lora / "run").iterdir()) == before


def test_lora_adapters_file_has_the_mode_of_the_others(lora):
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (lora / "run").iterdir() if p.is_file()}
    assert len(set(modes.values())) == 1, modes


def test_checkpoint_out_dir_inside_a_prepared_folder_is_refused(made, capsys):
    code, _, err = run(train.main, capsys, *TINY, "--data", str(made / "data"), "--out-dir", str(made / "data" / "o"))
    line = one_line(err)
    assert code == 2 and "--out-dir" in line and "prepared" in line


# --- anomaly mode and checkpointed blocks in training ----------------------------------------------------


def test_anomaly_checkpointed_blocks_with_health_every_iteration(made, tmp_path, capsys):
    code, _, err = run(train.main, capsys, *TINY, "--data", str(made / "text.txt"), "--max-iters", "2",
                       "--checkpoint-blocks", "--health-interval", "1", "--out-dir", str(tmp_path / "o"))
    assert code == 0, err
    records = [json.loads(line) for line in (tmp_path / "o" / "health.jsonl").read_text().splitlines()]
    assert len(records) == 2


def test_anomaly_in_a_checkpointed_block_names_the_blocks_layer():
    with ag.seeded(0):
        model = GPT(GPTConfig(vocab_size=8, block_size=8, n_layer=2, n_head=2, n_embd=8))
    model.transformer.checkpoint_blocks = True
    model.transformer.h[1].attn.c_attn.weight.data[0, 0] = np.nan
    x = np.zeros((1, 4), dtype=np.int64)
    with ag.detect_anomaly(), pytest.raises(ag.AnomalyError) as caught:
        model(x, x)[1].backward()
    assert "module: transformer.h.1" in str(caught.value)


# --- the tokenizer's pattern is untrusted ----------------------------------------------------------------


def test_pattern_a_catastrophic_pattern_in_a_checkpoint_cannot_hang_sample(tmp_path):
    """(a|aa)+$ backtracks through every way of writing a run of a's: a 40-letter prompt would take hours."""
    with ag.seeded(0):
        GPT(GPTConfig(vocab_size=256, block_size=8, n_layer=1, n_head=1, n_embd=4)).save_pretrained(tmp_path / "m")
    (tmp_path / "m" / "gptgrad_tokenizer.json").write_text(json.dumps({"kind": "byte_bpe", "merges": [],
                                                                        "pattern": r"(a|aa)+$"}))
    result = subprocess_run(["-m", "models.sample", str(tmp_path / "m"), "--prompt", "a" * 40 + "!",
                             "--max-new-tokens", "2"], timeout=60)
    line = one_line(result.stderr)
    assert result.returncode == 1 and "gptgrad_tokenizer.json" in line and "pattern" in line


# --- leftovers: sizes refused up front ------------------------------------------------------------------


@pytest.mark.parametrize("flag, value", [("--grad-accum", "1000000000"), ("--sample-tokens", "1000000000000")])
def test_leftover_sizes_beyond_memory_are_refused_at_parse_time(made, tmp_path, capsys, flag, value):
    started = time.perf_counter()
    code, _, err = run(train.main, capsys, *TINY, "--data", str(made / "text.txt"), "--out-dir",
                       str(tmp_path / "o"), flag, value)
    line = one_line(err)
    assert code == 2 and flag in line and "memory" in line
    assert time.perf_counter() - started < 10 and not (tmp_path / "o").exists()


def test_leftover_sample_refuses_new_tokens_beyond_memory_up_front(made, capsys):
    code, _, err = run(sample.main, capsys, str(made / "run"), "--max-new-tokens", "1000000000000")
    line = one_line(err)
    assert code == 2 and "--max-new-tokens" in line and "memory" in line


def add_npz_entry(path, name, header_shape, data, compress=True):
    """Append an entry to an .npz (a zip) whose .npy header claims `header_shape` float32 and holds `data`."""
    import io
    import zipfile
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f4", "fortran_order": False, "shape": header_shape})
    with zipfile.ZipFile(path, "a", zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED) as archive:
        archive.writestr(name, header.getvalue() + data)  # the header function writes the magic too


@pytest.mark.parametrize("how, message", [
    ("bomb", "is damaged (ValueError: it unpacks to "),  # 64 MB of zeros deflate to 64 KB
    ("header", "is damaged (ValueError: entry state.0.huge.npy claims a (1000000000000,) float32 array, more than "
               "its 128 bytes hold)"),  # the header alone
])
def test_an_optimizer_file_that_would_unpack_past_its_weights_is_refused_before_unpacking(
        made, tmp_path, capsys, monkeypatch, how, message):
    """Its entries were unpacked whole before any check: a 1 MB file took 2.1 GB, a header's shape allocated first."""
    folder = copy_folder(made / "run", tmp_path / "run")
    if how == "bomb":
        add_npz_entry(folder / "optimizer.npz", "state.0.zeros.npy", (16 * 2 ** 20,), bytes(64 * 2 ** 20))
    else:
        add_npz_entry(folder / "optimizer.npz", "state.0.huge.npy", (10 ** 12,), b"", compress=False)
    load = np.load
    monkeypatch.setattr(checkpoint.np, "load", lambda *a, **k: pytest.fail("unpacked before the check"))
    code, _, err = run(train.main, capsys, "--resume", "--max-iters", "3", "--out-dir", str(folder))
    monkeypatch.setattr(checkpoint.np, "load", load)
    assert code == 1 and message in one_line(err) and str(folder / "optimizer.npz") in err


def test_an_optimizer_state_that_is_not_finite_is_refused_on_resume_naming_the_file(made, tmp_path, capsys):
    """Resumed, it made every weight NaN at the first step, and the run blamed its own --lr."""
    folder = copy_folder(made / "run", tmp_path / "run")
    with np.load(folder / "optimizer.npz", allow_pickle=False) as f:
        arrays = {key: f[key] for key in f.files}
    arrays["state.0.exp_avg"] = np.full_like(arrays["state.0.exp_avg"], np.nan)
    np.savez(folder / "optimizer.npz", **arrays)
    state = json.loads((folder / "train_state.json").read_text())
    state["sha256"]["optimizer.npz"] = checkpoint._arrays_sha256(arrays)  # as the diverged run would have saved it
    (folder / "train_state.json").write_text(json.dumps(state))
    code, _, err = run(train.main, capsys, "--resume", "--max-iters", "3", "--out-dir", str(folder))
    assert code == 1 and one_line(err) == (
        f"train: error: {folder / 'optimizer.npz'} does not fit this model: AdamW.load_state_dict: exp_avg of "
        "parameter 0 holds NaN or infinite values; the run that saved it had diverged, or the state was changed "
        "since: load one saved before that")


def test_run_state_and_json_numbers_that_python_cannot_take_are_one_line(made, tmp_path, capsys):
    folder = copy_folder(made / "run", tmp_path / "run")
    state = json.loads((folder / "train_state.json").read_text())
    state["data_rng"]["state"] = {"state": -1, "inc": -1}  # out of uint64's range: an OverflowError
    (folder / "train_state.json").write_text(json.dumps(state))
    code, _, err = run(train.main, capsys, "--resume", "--max-iters", "3", "--out-dir", str(folder))
    assert code == 1 and "'data_rng' is not a random generator's state (Python integer -1 out of bounds" in one_line(err)
    (folder / "config.json").write_text('{"n_layer": ' + "9" * 5000 + "}")
    code, _, err = run(sample.main, capsys, str(folder))
    assert code == 1 and f"{folder / 'config.json'} is not valid JSON (Exceeds the limit" in one_line(err)


def test_weights_or_adapters_that_are_not_floating_point_are_refused(made, lora, tmp_path, capsys):
    """int8 or bool tables were cast to float32 and sampled from without a word."""
    from safetensors.numpy import load_file, save_file
    folder = copy_folder(made / "run", tmp_path / "run")
    weights = load_file(str(folder / "model.safetensors"))
    weights["transformer.h.0.ln_1.weight"] = weights["transformer.h.0.ln_1.weight"].astype(np.int8)
    save_file(weights, str(folder / "model.safetensors"))
    code, _, err = run(sample.main, capsys, str(folder), "--max-new-tokens", "1")
    assert code == 1 and one_line(err) == (f"sample: error: the weights in {folder} are damaged: "
                                           "transformer.h.0.ln_1.weight is int8, where GPT-2's weights are floating "
                                           "point")
    adapted = copy_folder(lora / "run", tmp_path / "adapted")
    adapters = load_file(str(adapted / "adapters.safetensors"))
    save_file({k: v.astype(bool) for k, v in adapters.items()}, str(adapted / "adapters.safetensors"))
    code, _, err = run(sample.main, capsys, str(adapted), "--max-new-tokens", "1")
    assert code == 1 and "is bool, where models.train writes floating point" in one_line(err)


def test_a_fifo_named_like_weights_beside_a_base_is_not_read(lora, tmp_path):
    """The base's fingerprint read every *.safetensors: a FIFO there blocked the command forever."""
    base = tmp_path / "base"
    copy_folder(lora / "base", base)
    before = checkpoint.fingerprint(base)
    os.mkfifo(base / "zz.safetensors")
    found = []
    reader = threading.Thread(target=lambda: found.append(checkpoint.fingerprint(base)), daemon=True)
    reader.start()
    reader.join(timeout=30)
    if reader.is_alive():  # free the blocked reader: a writer that opens and closes ends its read
        os.close(os.open(base / "zz.safetensors", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("fingerprint read the FIFO")
    assert found == [before]


@pytest.mark.parametrize("change, problem", [
    (lambda encoder: encoder.update({"a": 1000}), "its ids run from 0 to 1000"),
    (lambda encoder: encoder.update({"ab": 5}), "id 5 is given to two tokens"),
])
def test_a_gpt2_encoder_that_does_not_number_its_tokens_once_each_is_refused(change, problem):
    """An id past the vocabulary reached the embedding as an IndexError; a repeated one decoded wrongly."""
    from models.gpt.tokenizer import GPT2Tokenizer, bytes_to_unicode
    encoder = {ch: b for b, ch in bytes_to_unicode().items()}
    change(encoder)
    with pytest.raises(ValueError, match=rf"must number its {len(encoder)} tokens 0 to {len(encoder) - 1}, each "
                                         rf"once, but {problem}"):
        GPT2Tokenizer(vocabulary=(encoder, []))
