"""models.prepare → models.train --data DIR → models.eval: the shard format, the same output for any number of
workers, interruptions that never leave a shard that looks whole, and one-line errors for damaged folders."""
import hashlib
import io
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import autograd as ag
from models.training import checkpoint
from models.training import eval as evaluate
from models.training import prepare, train
from models.training.data import TokenData
from models.training.shards import (HEADER, MAGIC, PreparedData, ShardError, ShardWriter, open_shard, read_header,
                           token_dtype)
from models.gpt.gpt2 import GPT, GPTConfig
from models.gpt.tokenizer import CharTokenizer, GPT2Tokenizer
from tests.models.conftest import random_gpt2_folder

ROOT = Path(__file__).resolve().parents[2]
WORDS = ["the", "king", "queen", "of", "and", "thou", "art", "it's", "don't", "1999", "café", "中文", "🙂", "—"]
TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
        "--eval-interval", "10", "--eval-iters", "2", "--warmup-iters", "2", "--lr-decay-iters", "20",
        "--peak-tflops", "1", "--no-progress", "--sample-tokens", "5"]


def write_corpus(folder, files, lines, seed=0):
    """`files` text files of random words, with GPT-2's awkward whitespace (runs of spaces, blank lines, tabs)."""
    rng = random.Random(seed)
    for i in range(files):
        path = folder / ("sub" if i % 4 == 0 else "") / f"book{i:02d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(" ".join(rng.choice(WORDS) for _ in range(rng.randint(0, 12)))
                                + rng.choice(["\n", "\n", "  \n", "\n\n", "\t\n"]) for _ in range(lines)),
                        encoding="utf-8")
    return folder


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path / "corpus", files=12, lines=60)


@pytest.fixture(scope="module")
def gpt2_prepared(tmp_path_factory):
    """A corpus of twelve files and its GPT-2 shards (one worker, 1 MB sections, shards of 3000 tokens)."""
    root = tmp_path_factory.mktemp("gpt2")
    corpus = write_corpus(root / "corpus", files=12, lines=60)
    out = root / "out1"
    assert prepare.main([str(corpus), "--out", str(out), "--workers", "1", "--shard-tokens", "3000",
                         "--no-progress"]) == 0
    return corpus, out


def run_prepare(capsys, *argv):
    code = prepare.main([*argv, "--no-progress"])
    out, err = capsys.readouterr()
    return code, out, err


def files_of(folder):
    return {p.name: p.read_bytes() for p in sorted(Path(folder).iterdir())}


# --- the shard format ------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["uint16", "uint32"])
def test_a_shard_round_trips_with_its_header(tmp_path, dtype):
    tokens = np.array([0, 1, 7, np.iinfo(dtype).max], dtype=dtype)
    path = tmp_path / "s.bin"
    shard = ShardWriter(path, tokens.dtype)
    shard.write(tokens[:1])
    shard.write(tokens[1:])
    assert shard.close() == zlib.crc32(tokens.astype(f"<u{tokens.itemsize}").tobytes())
    magic, version, itemsize, count, _, reserved = HEADER.unpack(path.read_bytes()[:HEADER.size])
    assert (magic, version, itemsize, count, reserved) == (MAGIC, 1, tokens.itemsize, 4, 0)
    assert path.stat().st_size == 32 + 4 * tokens.itemsize
    assert read_header(path)[:2] == (np.dtype(dtype), 4)
    np.testing.assert_array_equal(open_shard(path, verify=True), tokens)


def test_tokens_are_uint16_while_the_vocabulary_fits():
    assert token_dtype(65536) == np.uint16 and token_dtype(65537) == np.uint32 and token_dtype(50257) == np.uint16


def damage(path, how):
    data = bytearray(path.read_bytes())
    if how == "truncated":
        data = data[:-3]
    elif how == "magic":
        data[:8] = b"NOTASHRD"
    elif how == "version":
        data[8:12] = (2).to_bytes(4, "little")
    elif how == "token":
        data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how, message", [("truncated", "is truncated: its header gives"),
                                          ("magic", "is not a token shard"),
                                          ("version", "is a version 2 shard and this models.prepare reads version 1"),
                                          ("token", "is damaged: its tokens do not match the checksum")])
def test_a_damaged_shard_is_one_line_naming_it(tmp_path, how, message):
    path = tmp_path / "train_000000.bin"
    shard = ShardWriter(path, np.uint16)
    shard.write(np.arange(10))
    shard.close()
    damage(path, how)
    with pytest.raises(ShardError) as caught:
        open_shard(path, verify=True)
    assert message in str(caught.value) and str(path) in str(caught.value) and "\n" not in str(caught.value)


# --- prepare -------------------------------------------------------------------


def test_tokens_are_each_file_encoded_whole_and_the_same_for_any_workers(tmp_path, gpt2_prepared, capsys):
    corpus, one_worker = gpt2_prepared
    code, line, err = run_prepare(capsys, str(corpus), "--out", str(tmp_path / "out3"), "--workers", "3",
                                  "--section-kb", "1", "--shard-tokens", "3000")
    assert code == 0, err
    assert files_of(tmp_path / "out3") == files_of(one_worker)  # byte for byte, meta.json too
    files = sorted(corpus.rglob("*.txt"))
    gpt2 = GPT2Tokenizer()
    expected = {"train": [], "val": []}
    for i, path in enumerate(files):  # twelve files: the tenth is held out
        expected["val" if i == 9 else "train"] += gpt2.encode(path.read_text(encoding="utf-8")) + [gpt2.eot_token]
    data = PreparedData(one_worker)
    for split in ("train", "val"):
        assert data.splits[split][:].tolist() == expected[split]
    meta = data.meta
    assert meta["dtype"] == "uint16" and meta["tokenizer"] == {"kind": "gpt2"}
    assert meta["split"]["by"] == "file" and meta["split"]["val"] == [{"path": str(files[9]), "from_byte": 0}]
    assert [s["tokens"] for s in meta["splits"]["train"]["shards"][:-1]] == [3000] * (len(expected["train"]) // 3000)
    assert [s["path"] for s in meta["sources"]] == list(map(str, files))
    assert meta["sources"][0]["bytes"] == files[0].stat().st_size
    import hashlib
    assert meta["sources"][3]["sha256"] == hashlib.sha256(files[3].read_bytes()).hexdigest()
    assert line.startswith(f"prepared {tmp_path / 'out3'}: 12 files (") and "held out by file" in line
    assert "MB/s" in line and "tokens/s" in line and line.count("\n") == 1


def first_cut(data, start, end):
    """next_cut's rule, read off the whole text: the first byte offset in [start, end) after a newline or before
    a space, between two characters that are not whitespace, or between the \\r and \\n of such a CRLF; else
    `end`."""
    text = data.decode("utf-8")
    offset = 0
    for i, ch in enumerate(text):
        if start <= offset < end and 0 < i < len(text) and (
                (text[i - 1] == "\n" and i > 1 and not text[i - 2].isspace() and not ch.isspace())
                or (text[i - 1:i + 1] == "\r\n" and i > 1 and not text[i - 2].isspace()
                    and i + 1 < len(text) and not text[i + 1].isspace())
                or (ch == " " and not text[i - 1].isspace() and i + 1 < len(text) and not text[i + 1].isspace())):
            return offset
        offset += len(ch.encode("utf-8"))
    return end


@given(st.text(st.sampled_from("ab \n\r\t\xa0\u3000é中🙂"), max_size=120), st.data())
@settings(max_examples=300, deadline=None)
def test_a_cut_is_the_first_safe_place_whatever_the_windows(text, data):
    """A newline (LF or CRLF) or a space between non-space characters, multi-byte ones (é, 中, 🙂) and Unicode
    spaces (no-break, ideographic) among them, found through windows of 16 bytes that cut characters apart."""
    raw = text.encode("utf-8")
    start = data.draw(st.integers(0, len(raw)))
    end = data.draw(st.integers(start, len(raw)))
    assert prepare.next_cut(io.BytesIO(raw), start, end, window=16) == first_cut(raw, start, end)


def test_a_cut_just_after_a_newline_sees_the_four_byte_character_before_it():
    """Hypothesis's find: a window opening 4 bytes before the cut held the newline but not the 🙂 before it."""
    raw = "a\u3000\u3000🙂🙂🙂\na".encode("utf-8")
    assert prepare.next_cut(io.BytesIO(raw), 20, 21, window=16) == first_cut(raw, 20, 21) == 20


@pytest.mark.parametrize("window", [16, 64])
def test_a_crlf_is_cut_between_its_cr_and_lf_from_any_start_and_windows(window):
    raw = "中文\r\n🙂\r\n\r\nab\r\n c \r\nd\re\r\n".encode("utf-8") * 3
    cuts = [prepare.next_cut(io.BytesIO(raw), start, len(raw), window) for start in range(len(raw) + 1)]
    assert cuts == [first_cut(raw, start, len(raw)) for start in range(len(raw) + 1)]
    assert raw[cuts[0] - 1:cuts[0] + 1] == b"\r\n"


def test_a_crlf_file_without_spaces_is_cut_at_its_line_ends(tmp_path, capsys):
    """CRLF lines with no space between words (CJK text, a word list saved on Windows) had no cut at all: the
    whole file was one section, and its val tail was refused as having "no line break". A CRLF is cut between
    its \\r and \\n, where GPT-2's chunks end too, so the pieces encode as the whole."""
    rng = random.Random(0)
    text = "".join("".join(rng.choice("春夏秋冬山川花鳥風月") for _ in range(rng.randint(1, 30))) + "\r\n"
                   for _ in range(300))
    path = tmp_path / "crlf.txt"
    path.write_bytes(text.encode("utf-8"))
    assert len(list(prepare.sections(prepare.plan_parts([path], 0.1)[0], 1024))) > 10
    code, _, err = run_prepare(capsys, str(path), "--out", str(tmp_path / "out"), "--section-kb", "1",
                               "--workers", "1")
    assert code == 0, err
    data = PreparedData(tmp_path / "out")
    raw = text.encode("utf-8")
    cut = data.meta["split"]["val"][0]["from_byte"]
    assert raw[cut - 1:cut + 1] == b"\r\n" and 0.9 <= cut / len(raw) < 0.92
    gpt2 = GPT2Tokenizer()
    train_text, val_text = raw[:cut].decode("utf-8"), raw[cut:].decode("utf-8")
    assert gpt2.encode(train_text) + gpt2.encode(val_text) == gpt2.encode(text)
    assert data.splits["train"][:].tolist() == gpt2.encode(train_text)
    assert data.splits["val"][:].tolist() == gpt2.encode(val_text) + [gpt2.eot_token]


def test_a_file_reached_twice_names_both_paths(tmp_path, corpus, capsys):
    # it once said "given twice; name each file or folder once" of a link inside the one folder given
    (corpus / "again.txt").symlink_to(corpus / "book01.txt")
    code, out, err = run_prepare(capsys, str(corpus), "--out", str(tmp_path / "out"))
    assert code == 1 and out == "" and err == (
        f"prepare: error: {corpus / 'again.txt'} and {corpus / 'book01.txt'} are the same file (given twice, or a "
        "symbolic link to it), whose text would count twice; name each file or folder once, and leave out links to "
        "files already given\n")
    (corpus / "again.txt").unlink()
    book = corpus / "book01.txt"
    code, _, err = run_prepare(capsys, str(book), str(book), "--out", str(tmp_path / "out"))
    assert code == 1 and f"error: {book} and {book} are the same file (given twice" in err
    assert not (tmp_path / "out").exists()


def test_few_files_hold_out_each_files_tail_from_a_line_on(tmp_path, capsys):
    folder = write_corpus(tmp_path / "few", files=2, lines=300)
    code, _, err = run_prepare(capsys, str(folder), "--out", str(tmp_path / "out"), "--tokenizer", "char",
                               "--section-kb", "2")
    assert code == 0, err
    data = PreparedData(tmp_path / "out")
    texts = [p.read_text(encoding="utf-8") for p in sorted(folder.rglob("*.txt"))]
    tokenizer = CharTokenizer("".join(texts))
    assert data.meta["tokenizer"] == tokenizer.to_dict()
    val = data.meta["split"]["val"]
    assert data.meta["split"]["by"] == "tail" and len(val) == 2
    train_text, val_text = "", ""
    for text, held_out in zip(texts, val):
        cut = len(text.encode("utf-8")[:held_out["from_byte"]].decode("utf-8"))
        assert 0.88 < held_out["from_byte"] / len(text.encode("utf-8")) < 0.92
        assert text[cut - 1] == "\n" or text[cut] == " "  # a line or a word boundary
        train_text, val_text = train_text + text[:cut], val_text + text[cut:]
    assert data.splits["train"][:].tolist() == tokenizer.encode(train_text)
    assert data.splits["val"][:].tolist() == tokenizer.encode(val_text)


def test_prepared_batches_are_tokendatas_across_shard_boundaries(tmp_path, corpus, capsys):
    assert run_prepare(capsys, str(corpus), "--out", str(tmp_path / "out"), "--shard-tokens", "50",
                       "--tokenizer", "char")[0] == 0
    data = PreparedData(tmp_path / "out")
    assert len(data.splits["train"].paths) > 20
    whole = TokenData(np.arange(1))
    whole.splits = {split: np.asarray(data.splits[split][:]) for split in ("train", "val")}
    for split in ("train", "val"):
        x, y = data.batch(split, 6, 64, np.random.default_rng(3))  # 64 > 50: every block crosses a boundary
        xw, yw = whole.batch(split, 6, 64, np.random.default_rng(3))
        assert x.dtype == np.int64 and x.shape == (6, 64)
        np.testing.assert_array_equal(x, xw)
        np.testing.assert_array_equal(y, yw)


def test_a_prepared_corpus_is_fingerprinted_from_its_meta_without_reading_a_token(tmp_path, capsys):
    """The line MPI ranks compare before training: from meta.json's checksums, so the shards are not read (a
    corpus bigger than memory took minutes token by token); another corpus gives another line."""
    for name, lines in (("a", 60), ("b", 61)):
        folder = write_corpus(tmp_path / f"corpus-{name}", files=12, lines=lines)
        assert run_prepare(capsys, str(folder), "--out", str(tmp_path / name), "--tokenizer", "char")[0] == 0
    a, b = PreparedData(tmp_path / "a"), PreparedData(tmp_path / "b")
    expected = a.fingerprint(a.tokenizer())
    for shard in (tmp_path / "a").glob("*.bin"):
        shard.unlink()  # opened already: the fingerprint must not need them
    assert a.fingerprint(a.tokenizer()) == expected
    assert expected.startswith(f"a char tokenizer of {a.tokenizer().vocab_size} tokens, "
                               f"{len(a.splits['train']):,} train / {len(a.splits['val']):,} val tokens (CRC-32 ")
    assert b.fingerprint(b.tokenizer()) != expected


def test_a_rerun_of_a_finished_folder_does_nothing_and_other_options_are_refused(tmp_path, corpus, capsys):
    out = tmp_path / "out"
    assert run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "char")[0] == 0
    before = files_of(out)
    code, line, _ = run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "char")
    assert code == 0 and line.startswith(f"{out} already holds this corpus: 12 files")
    assert files_of(out) == before
    code, _, err = run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "gpt2")
    assert code == 1 and err == (f"prepare: error: {out} holds a corpus prepared from other files or options; "
                                 "choose another --out, or delete it first\n")


def test_a_second_run_into_a_folder_being_prepared_is_refused_and_writes_nothing(tmp_path, corpus, capsys):
    """Two runs into one --out at once each wrote their shards over the other's, and both said "prepared"."""
    out = tmp_path / "out"
    with checkpoint.writer_lock(out, "models.prepare run", "--out"):  # held, as a prepare writing to it holds it
        code, line, err = run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "char")
    assert (code, line) == (1, "") and err == (f"prepare: error: another models.prepare run (process {os.getpid()}) "
                                               f"is writing to {out}; wait for it to end or choose another --out\n")
    with checkpoint.writer_lock(out):  # a training run's: the message names the holder, not the one refused
        code, line, err = run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "char")
    assert (code, line) == (1, "") and err == (f"prepare: error: another training run (process {os.getpid()}) "
                                               f"is writing to {out}; wait for it to end or choose another --out\n")
    assert not out.exists()
    assert run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "char")[0] == 0  # once it ended
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus", "out"]  # the lock went with the run


def test_the_summary_counts_one_shard_in_the_singular(tmp_path, capsys):
    (tmp_path / "t.txt").write_text("hello there\n" * 10)
    code, line, err = run_prepare(capsys, str(tmp_path / "t.txt"), "--out", str(tmp_path / "out"), "--tokenizer",
                                  "char", "--val-fraction", "0")
    assert code == 0, err
    assert line.startswith(f"prepared {tmp_path / 'out'}: 1 file (0.0 MB) → 120 train + 0 val tokens (held out by "
                           "tail), char tokenizer (8 ids, uint16), 1 shard; ")


@pytest.mark.parametrize("inside", [False, True])
def test_an_out_folder_in_an_input_folder_is_refused_before_any_work(tmp_path, corpus, capsys, inside):
    """It once prepared, and a rerun with --pattern '*' read the shards there as text (refused as binary)."""
    out = corpus / "data" if inside else corpus
    before = sorted(corpus.rglob("*"))
    code, _, err = run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "char", "--pattern", "*")
    place = "is inside" if inside else "is"
    assert code == 1 and err == (f"prepare: error: --out {out} {place} the input folder {corpus}, where a --pattern "
                                 "that matches its meta.json or shards would read them as text; prepare into a "
                                 f"folder outside {corpus}\n")
    assert sorted(corpus.rglob("*")) == before  # nothing made, not even the folder


@pytest.mark.parametrize("out", ["runs", "runs/base/.."])
def test_an_out_folder_that_holds_a_checkpoint_is_refused_at_parse_time(tmp_path, corpus, capsys, out):
    """It once prepared there, and models.train then refused to save into the checkpoint inside the corpus."""
    (tmp_path / "runs").mkdir()
    random_gpt2_folder(tmp_path / "runs", "ab\n", n_layer=1)
    before = {p: p.read_bytes() for p in sorted((tmp_path / "runs").rglob("*")) if p.is_file()}
    with pytest.raises(SystemExit) as exit_:
        run_prepare(capsys, str(corpus), "--out", str(tmp_path / out), "--tokenizer", "char")
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (
        f"python -m models.prepare: error: argument --out: {tmp_path / out} holds {tmp_path.resolve() / 'runs/base'}, "
        "a training checkpoint or a model, and models.train saves no checkpoint inside a prepared corpus; prepare "
        "into a folder of its own (see --help)\n")
    assert {p: p.read_bytes() for p in sorted((tmp_path / "runs").rglob("*")) if p.is_file()} == before


@pytest.mark.parametrize("content, message", [(b"ok\n\xff\xfe bad", "is not UTF-8 text (byte 0xff at offset 3)")])
def test_a_file_that_is_not_utf8_is_one_line(tmp_path, capsys, content, message):
    (tmp_path / "bad.txt").write_bytes(content)
    code, _, err = run_prepare(capsys, str(tmp_path / "bad.txt"), "--out", str(tmp_path / "out"), "--tokenizer",
                               "gpt2", "--val-fraction", "0")  # too short to hold a val split
    assert code == 1 and err.count("\n") == 1 and message in err and str(tmp_path / "bad.txt") in err
    assert not (tmp_path / "out").exists()  # a failed first run leaves no empty folder


@pytest.mark.parametrize("text, message", [
    ("", "no text (0 bytes), so nothing to prepare"),
    ("hello there\n", "the corpus (12 bytes) is too small to hold out a val split with --val-fraction 0.1; give "
                      "more text, or --val-fraction 0 for none"),
])
def test_a_corpus_training_could_not_use_is_refused_before_any_folder_is_made(tmp_path, capsys, text, message):
    """It once prepared 0 tokens, or 0 val tokens, and models.train refused the folder only then."""
    (tmp_path / "t.txt").write_text(text)
    out = tmp_path / "data" / "t"
    code, _, err = run_prepare(capsys, str(tmp_path / "t.txt"), "--out", str(out), "--tokenizer", "char")
    assert code == 1 and message in err and err.count("\n") == 1
    assert not (tmp_path / "data").exists()


@pytest.mark.parametrize("empty, split", [("b.txt", "val"), ("a.txt", "train")])
def test_an_empty_file_that_is_a_whole_split_is_named_not_called_a_corpus_too_small(tmp_path, capsys, empty, split):
    """Split by file, an empty file that was the whole val (or train) split read "the corpus (2,400 bytes) is too
    small to hold out a val split"."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("a.txt", "b.txt"):
        (corpus / name).write_text("" if name == empty else "hello world\n" * 200)
    code, _, err = run_prepare(capsys, str(corpus), "--out", str(tmp_path / "out"), "--tokenizer", "char",
                               "--val-fraction", "0.5")
    assert code == 1 and err == (f"prepare: error: --val-fraction 0.5 splits the 2 files by whole file, and the "
                                 f"{split} split's file is empty ({corpus / empty}); leave the empty files out, or "
                                 "put text in them\n")


def test_a_tail_with_no_cut_is_named_as_such_not_as_a_corpus_too_small(tmp_path, capsys):
    (tmp_path / "one.txt").write_text("x" * 300_000)
    code, _, err = run_prepare(capsys, str(tmp_path / "one.txt"), "--out", str(tmp_path / "out"), "--tokenizer",
                               "char")
    assert code == 1 and err.count("\n") == 1 and "too small" not in err
    assert f"{tmp_path / 'one.txt'}: its last 10% (30,000 bytes) has no line break or space between words" in err
    assert "break its lines, give 10 or more files (a val split by file), or --val-fraction 0 for none" in err


@pytest.mark.parametrize("files, fraction, val_files", [(1, 0.9, None), (1, 0.6, None), (5, 0.6, 3), (4, 0.5, 2),
                                                        (12, 0.1, 1), (20, 0.1, 2), (9, 0.1, None)])
def test_the_val_split_follows_any_fraction_the_option_accepts(tmp_path, capsys, files, fraction, val_files):
    """Above about 0.67 even one file went whole to val ("too small to hold out a train split"), and 0.6 held out
    every other file: floor(n·f) files now, spread evenly, or each file's tail while n·f < 1."""
    folder = write_corpus(tmp_path / "c", files=files, lines=200)
    code, _, err = run_prepare(capsys, str(folder), "--out", str(tmp_path / "out"), "--tokenizer", "char",
                               "--val-fraction", str(fraction))
    assert code == 0, err
    split = PreparedData(tmp_path / "out").meta["split"]
    if val_files is None:
        assert split["by"] == "tail" and len(split["val"]) == files
        for held_out in split["val"]:
            size = Path(held_out["path"]).stat().st_size
            assert 1 - fraction - 0.02 < held_out["from_byte"] / size < 1 - fraction + 0.02
    else:
        assert split["by"] == "file" and len(split["val"]) == val_files
        if fraction == 0.1:  # every tenth file, as before
            names = sorted(folder.rglob("*.txt"))
            assert [v["path"] for v in split["val"]] == [str(names[9 + 10 * i]) for i in range(val_files)]


def test_only_its_own_shards_are_removed_from_out(tmp_path, corpus, capsys):
    """The clean-up of stale shards once removed every train_*.bin and val_*.bin: a user's files too."""
    out = tmp_path / "out"
    out.mkdir()
    for name in ("train_backup.bin", "val_old.bin", "train_1.bin", "notes.txt"):
        (out / name).write_text("mine\n")
    (out / "train_000007.bin").write_bytes(b"stale")  # a shard name: a leftover of an earlier preparation
    assert run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "char")[0] == 0
    names = {p.name for p in out.iterdir()}
    assert {"train_backup.bin", "val_old.bin", "train_1.bin", "notes.txt"} <= names
    assert "train_000007.bin" not in names
    assert all((out / name).read_text() == "mine\n" for name in ("train_backup.bin", "val_old.bin", "train_1.bin"))


@pytest.mark.parametrize("how", ["append", "rewrite"])
def test_a_file_that_changes_while_it_is_read_is_refused_and_nothing_kept(tmp_path, capsys, monkeypatch, how):
    """An append once finished with exit 0: meta.json's bytes from the new size, its SHA-256 and tokens the old."""
    text = "".join(f"line {i} of the text\n" for i in range(4000))
    source = tmp_path / "a.txt"
    source.write_text(text)
    read_text, calls = prepare.read_text, []

    def changing(section):
        calls.append(section)
        if len(calls) == 2:
            if how == "append":
                with open(source, "a") as f:
                    f.write("APPENDED " * 1000)
            else:  # the same size, other characters (and a later mtime)
                source.write_text(text.upper())
                os.utime(source, ns=(time.time_ns(), time.time_ns() + 10 ** 9))
        return read_text(section)

    monkeypatch.setattr(prepare, "read_text", changing)
    argv = [str(source), "--out", str(tmp_path / "out"), "--workers", "1", "--section-kb", "8", "--shard-tokens",
            "5000", "--tokenizer", "char"]
    code, _, err = run_prepare(capsys, *argv)
    assert code == 1 and err == (f"prepare: error: {source} changed while being read (its size or mtime); no shard "
                                 "was kept: prepare again once nothing writes to it\n")
    assert not (tmp_path / "out").exists()  # nor a progress, nor a shard: nothing to mistake for a preparation
    monkeypatch.setattr(prepare, "read_text", read_text)
    assert run_prepare(capsys, *argv)[0] == 0
    meta = PreparedData(tmp_path / "out").meta
    assert meta["sources"][0]["bytes"] == source.stat().st_size
    assert meta["sources"][0]["sha256"] == hashlib.sha256(source.read_bytes()).hexdigest()


def test_gpt2_refuses_a_file_that_is_not_utf8_before_writing_a_shard(tmp_path, capsys):
    """It once wrote the earlier files' shards first, and a rerun after the fix refused the unfinished folder."""
    folder = write_corpus(tmp_path / "c", files=3, lines=200)
    bad = sorted(folder.rglob("*.txt"))[-1]
    good = bad.read_bytes()
    bad.write_bytes(good + b"ok\n\xff bad\n")
    argv = [str(folder), "--out", str(tmp_path / "out"), "--workers", "1", "--shard-tokens", "100",
            "--tokenizer", "gpt2"]
    code, _, err = run_prepare(capsys, *argv)
    assert code == 1 and err.count("\n") == 1
    assert f"{bad} is not UTF-8 text (byte 0xff at offset {len(good) + 3})" in err
    assert not (tmp_path / "out").exists()
    bad.write_bytes(good)
    code, _, err = run_prepare(capsys, *argv)
    assert code == 0, err


def test_a_rerun_with_other_sections_starts_afresh_and_ends_the_same(tmp_path, corpus, capsys, monkeypatch):
    """A saved progress counts sections, so it is dropped when --section-kb changes; the output is that of a
    run never interrupted."""
    argv = [str(corpus), "--tokenizer", "char", "--shard-tokens", "500", "--workers", "1"]
    assert run_prepare(capsys, *argv, "--out", str(tmp_path / "whole"), "--section-kb", "1")[0] == 0
    finish = prepare.SplitWriter._finish_shard
    finished = []

    def stop_after_three(writer, next_at):
        finish(writer, next_at)
        finished.append(writer.done[-1]["name"])
        if len(finished) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(prepare.SplitWriter, "_finish_shard", stop_after_three)
    out = tmp_path / "out"
    assert run_prepare(capsys, *argv, "--out", str(out), "--section-kb", "2")[0] == 130
    saved = json.loads((out / "prepare_progress.json").read_text())
    assert saved["sectioning"]["section_kb"] == 2 and len(saved["shards"]["train"]) == 2
    monkeypatch.undo()
    code, line, _ = run_prepare(capsys, *argv, "--out", str(out), "--section-kb", "1")
    assert code == 0 and "went on after" not in line
    assert files_of(out) == files_of(tmp_path / "whole")


def test_ctrl_c_says_whether_a_rerun_can_go_on_from_what_it_wrote(tmp_path, corpus, capsys, monkeypatch):
    """Interrupted while reading, before any shard, it said "the shards written so far are whole: ... (see
    out/prepare_progress.json)", of a folder and a file that were not there."""
    argv = [str(corpus), "--tokenizer", "char", "--shard-tokens", "500", "--workers", "1",
            "--out", str(tmp_path / "out")]

    def interrupt(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare, "first_pass", interrupt)
    assert run_prepare(capsys, *argv) == (130, "", "\nprepare: interrupted; nothing was saved to go on from: run the "
                                                   "same command again to start afresh\n")
    assert not (tmp_path / "out").exists()
    monkeypatch.undo()
    write_json = prepare.write_json

    def interrupt_once_saved(*args):  # the first file written is the progress after the first shard
        write_json(*args)
        raise KeyboardInterrupt

    monkeypatch.setattr(prepare, "write_json", interrupt_once_saved)
    progress = tmp_path / "out" / "prepare_progress.json"
    assert run_prepare(capsys, *argv) == (130, "", "\nprepare: interrupted; the shards written so far are whole: run "
                                                   f"the same command again to go on (see {progress})\n")
    assert progress.is_file()


FORK_THREADS = """
import os, sys
from models.training import prepare
real_fork, counts = os.fork, []

def fork():
    pid = real_fork()
    if pid:  # where Python 3.12 counts the process's threads, to warn that the fork may deadlock
        counts.append(next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("Threads:")))
    return pid

os.fork = fork
assert prepare.main(sys.argv[1:]) == 0
print(counts)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="forked workers and /proc are Linux's")
def test_the_workers_are_forked_from_a_process_of_one_thread(tmp_path):
    """tqdm's monitor thread ran beside the fork (Python 3.12: "This process is multi-threaded, use of fork() may
    lead to deadlocks in the child"); OpenBLAS stops its own threads for a fork."""
    corpus = write_corpus(tmp_path / "corpus", files=2, lines=50)
    done = subprocess.run([sys.executable, "-c", FORK_THREADS, str(corpus), "--tokenizer", "char", "--workers", "2",
                           "--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "[1, 1]"  # the pool's two workers


def test_an_interrupted_prepare_never_leaves_a_shard_that_looks_whole(tmp_path):
    """Killed at random moments while it writes shards, then run again: every file named as a shard is whole,
    no meta.json appears before the end, and the last run ends with exactly an uninterrupted run's output."""
    corpus = write_corpus(tmp_path / "corpus", files=3, lines=4000)
    argv = [sys.executable, "-m", "models.prepare", str(corpus), "--tokenizer", "char", "--workers", "2",
            "--shard-tokens", "2000", "--section-kb", "8", "--no-progress"]
    subprocess.run([*argv, "--out", str(tmp_path / "whole")], cwd=ROOT, check=True, capture_output=True)
    out, rng, killed = tmp_path / "out", random.Random(1), 0

    def shards():
        return [*out.glob("train_*.bin"), *out.glob("val_*.bin")]

    for _ in range(4):
        before = len(shards())
        proc = subprocess.Popen([*argv, "--out", str(out)], cwd=ROOT, start_new_session=True,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while proc.poll() is None and len(shards()) <= before:  # until it writes shards of its own
            time.sleep(0.002)
        time.sleep(rng.uniform(0, 0.1))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # the run and its workers, at once
            killed += 1
        proc.wait()
        for path in shards():
            open_shard(path, verify=True)
        if not (out / "meta.json").exists():
            with pytest.raises(ShardError, match="its preparation did not finish"):
                PreparedData(out)
    assert killed >= 2, "the runs were not interrupted: the corpus is too small for this machine"
    subprocess.run([*argv, "--out", str(out)], cwd=ROOT, check=True, capture_output=True)
    assert files_of(out) == files_of(tmp_path / "whole")


# --- train --data DIR and eval ---------------------------------------------------


@pytest.fixture
def prepared(tmp_path, corpus, capsys):
    out = tmp_path / "prepared"
    code, _, err = run_prepare(capsys, str(corpus), "--out", str(out), "--tokenizer", "char",
                               "--shard-tokens", "1000")
    assert code == 0, err
    return out


def train_on(capsys, *argv):
    code = train.main([*TINY, *argv])
    out, err = capsys.readouterr()
    return code, out, err


def history(folder):
    return json.loads((folder / "train_state.json").read_text())["history"]


def test_prepare_train_eval(tmp_path, prepared, capsys):
    run = tmp_path / "run"
    code, out, err = train_on(capsys, "--data", str(prepared), "--max-iters", "20", "--out-dir", str(run))
    assert code == 0, err
    data = PreparedData(prepared)
    assert f"data: {len(data.splits['train']):,} train / {len(data.splits['val']):,} val tokens" in out
    assert history(run)[-1] < history(run)[0]
    model, tokenizer = checkpoint.load_model(run)
    assert tokenizer.to_dict() == data.meta["tokenizer"]

    assert evaluate.main([str(run), "--data", str(prepared), "--stride", "1", "--max-tokens", "60",
                          "--no-progress"]) == 0
    line = capsys.readouterr().out
    # stride 1: token p is scored once, from the (at most 16) tokens before it
    tokens = data.splits["val"][:60]
    model.eval()
    with ag.no_grad():
        losses = [model(ag.Tensor(tokens[max(0, p - 16):p][None]))[0].log_softmax().numpy()[0, -1, tokens[p]]
                  for p in range(1, 60)]
    mean = -float(np.mean(losses))
    assert line.startswith(f"eval: {run} on the val split of {prepared} (its first 60 of "
                           f"{len(data.splits['val']):,} tokens, 59 scored): loss {mean:.4f}, "
                           f"perplexity {np.exp(mean):.2f} (block 16, stride 1, ")


@pytest.mark.parametrize("option, value, problem", [
    ("--max-tokens", "16", "--max-tokens 16 is too few for one window of the model in {run} (its block size, 16 "
                           "tokens, and their targets); give --max-tokens 17 or more"),
    ("--stride", "17", "--stride 17 exceeds the block size 16 of the model in {run}, so tokens between windows "
                       "would go unscored; give --stride 16 or less"),
])
def test_eval_options_beyond_the_block_size_are_refused_before_a_weight_is_read(tmp_path, prepared, capsys, option,
                                                                               value, problem):
    """Their bound is the checkpoint's block size, which was read from the loaded model: the refusal came only after
    the weights had loaded (seconds for GPT-2), so a garbage weights file was reported instead of the option."""
    run = tmp_path / "r"
    assert train_on(capsys, "--data", str(prepared), "--max-iters", "1", "--out-dir", str(run))[0] == 0
    (run / "model.safetensors").write_bytes(b"not safetensors")
    with pytest.raises(SystemExit) as exit_info:
        evaluate.main([str(run), "--data", str(prepared), option, value, "--no-progress"])
    assert exit_info.value.code == 2
    assert capsys.readouterr().err == f"python -m models.eval: error: {problem.format(run=run)} (see --help)\n"


def test_eval_takes_a_max_tokens_just_above_the_block_size(tmp_path, prepared, capsys):
    assert train_on(capsys, "--data", str(prepared), "--max-iters", "1", "--out-dir", str(tmp_path / "r"))[0] == 0
    assert evaluate.main([str(tmp_path / "r"), "--data", str(prepared), "--max-tokens", "17", "--stride", "16",
                          "--no-progress"]) == 0
    assert "(its first 17 of " in capsys.readouterr().out


def test_eval_windows_score_every_target_once_with_the_context_promised():
    for n, block, stride in [(100, 16, 8), (100, 16, 16), (17, 16, 5), (50, 7, 1), (33, 16, 16)]:
        scored = []
        for begin, skip in evaluate.windows(n, block, stride):
            assert 0 <= begin <= n - 1 - block and 0 <= skip < block
            positions = list(range(begin + 1 + skip, begin + block + 1))
            assert all(p - begin >= min(p, block - stride) for p in positions)  # context before each target
            scored += positions
        assert scored == list(range(1, n))


@pytest.mark.parametrize("val_text, val_fraction, problem", [
    ("a", "0.1", "has 1 token, too few for one window of the model's block size 32 and its targets (33 tokens); "
                 "prepare more text"),
    (None, "0", "is empty: it was prepared with --val-fraction 0; give --split train, or prepare the text again "
                "with a --val-fraction above 0"),
])
def test_eval_a_split_too_short_for_a_window_says_how_many_tokens_and_the_fix(tmp_path, capsys, val_text,
                                                                            val_fraction, problem):
    """A split of one token read "has 1 tokens"; an empty val split (--val-fraction 0) was told to "prepare more
    text", which leaves it empty."""
    text = "the king and queen\n" * 40
    model = random_gpt2_folder(tmp_path, text, n_layer=1) / "base"
    books = tmp_path / "books"
    books.mkdir()
    for i in range(10):  # ten files: the last in sorted order is the val split
        (books / f"b{i}.txt").write_text(val_text if i == 9 and val_text else text, encoding="utf-8")
    data = tmp_path / "data"
    assert run_prepare(capsys, str(books), "--out", str(data), "--tokenizer", "char", "--val-fraction",
                       val_fraction)[0] == 0
    assert evaluate.main([str(model), "--data", str(data), "--no-progress"]) == 1
    assert capsys.readouterr().err == f"eval: error: the val split of {data} {problem}\n"


def test_resume_on_prepared_data_continues_exactly(tmp_path, prepared, capsys):
    straight, split = tmp_path / "straight", tmp_path / "split"
    assert train_on(capsys, "--data", str(prepared), "--max-iters", "20", "--out-dir", str(straight))[0] == 0
    assert train_on(capsys, "--data", str(prepared), "--max-iters", "10", "--out-dir", str(split))[0] == 0
    code, _, err = train_on(capsys, "--max-iters", "20", "--out-dir", str(split), "--resume")  # --data saved
    assert code == 0, err
    assert history(split) == history(straight)


def test_resume_takes_the_same_corpus_prepared_again_and_refuses_another(tmp_path, corpus, prepared, capsys):
    """The checkpoint's fingerprint is of the shards meta.json lists (their token counts and checksums), not of its
    bytes: preparing the same text again (other mtimes in meta.json) resumes; other text prepared into the same folder
    is refused before any step."""
    run, again = tmp_path / "run", ("--out", str(prepared), "--tokenizer", "char", "--shard-tokens", "1000")
    assert train_on(capsys, "--data", str(prepared), "--max-iters", "10", "--out-dir", str(run))[0] == 0
    saved = json.loads((run / "train_state.json").read_text())["data_fingerprint"]
    data = PreparedData(prepared)
    assert f"{len(data.splits['train']):,} train / {len(data.splits['val']):,} val tokens" in saved
    meta = (prepared / "meta.json").read_bytes()
    for book in corpus.rglob("*.txt"):
        os.utime(book, ns=(10 ** 18, 10 ** 18))
    shutil.rmtree(prepared)
    assert run_prepare(capsys, str(corpus), *again)[0] == 0
    assert (prepared / "meta.json").read_bytes() != meta
    code, _, err = train_on(capsys, "--out-dir", str(run), "--resume", "--max-iters", "20")
    assert code == 0, err
    (corpus / "book01.txt").unlink()
    shutil.rmtree(prepared)
    assert run_prepare(capsys, str(corpus), *again)[0] == 0
    data = PreparedData(prepared)
    now = data.fingerprint(data.tokenizer())
    assert now != saved
    before = files_of(run)
    code, out, err = train_on(capsys, "--out-dir", str(run), "--resume", "--max-iters", "30")
    assert code == 1 and err == (
        f"train: error: the data {prepared} has changed since the checkpoint in {run} trained on it: it was {saved}, "
        f"it is {now}; put back the data it trained on, or train on this data from the start in a new --out-dir (to "
        "go on with it on purpose, give it another path and pass that as --data)\n")
    assert "iter " not in out and files_of(run) == before


def test_a_tokenizer_other_than_the_checkpoints_is_one_line(tmp_path, prepared, gpt2_prepared, capsys):
    run = tmp_path / "run"
    assert train_on(capsys, "--data", str(prepared), "--max-iters", "1", "--out-dir", str(run))[0] == 0
    gpt2_data = gpt2_prepared[1]
    message = (f"holds tokens of the gpt2 tokenizer (50,257 ids), but the model of {run} reads the char tokenizer "
               f"({PreparedData(prepared).tokenizer().vocab_size} ids); prepare the text again with that tokenizer")
    code, _, err = train_on(capsys, "--data", str(gpt2_data), "--out-dir", str(run), "--resume", "--max-iters", "2")
    assert code == 1 and err.count("\n") == 1 and message in err
    assert evaluate.main([str(run), "--data", str(gpt2_data), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    code, _, err = train_on(capsys, "--data", str(prepared), "--tokenizer", "gpt2", "--out-dir", str(tmp_path / "x"))
    assert code == 1 and f"--tokenizer gpt2, but {prepared} holds tokens of the char tokenizer" in err


def test_another_character_vocabulary_is_refused_without_asking_to_prepare_again(tmp_path, prepared, capsys):
    # models.prepare takes a character vocabulary from the text: "prepare the text again with that tokenizer" was
    # advice no option can follow
    other = tmp_path / "other"
    (tmp_path / "abc.txt").write_text("abc cab\n" * 400, encoding="utf-8")
    assert run_prepare(capsys, str(tmp_path / "abc.txt"), "--out", str(other), "--tokenizer", "char")[0] == 0
    run = tmp_path / "run"
    assert train_on(capsys, "--data", str(prepared), "--max-iters", "1", "--out-dir", str(run))[0] == 0
    # and before a weight is read: the tokenizer came with the loaded model, so damaged weights were reported instead
    (run / "model.safetensors").write_bytes(b"not safetensors")
    message = (f"{other} holds tokens of the char tokenizer (5 ids), but the model of {run} reads another "
               f"vocabulary of the char tokenizer ({PreparedData(prepared).tokenizer().vocab_size} ids); a character "
               "vocabulary is made from the text itself, so train a new model on it\n")
    assert evaluate.main([str(run), "--data", str(other), "--no-progress"]) == 1
    assert capsys.readouterr().err == f"eval: error: {message}"
    code, _, err = train_on(capsys, "--init-from", str(run), "--data", str(other), "--out-dir", str(tmp_path / "tuned"))
    assert code == 1 and err == f"train: error: {message}"
    assert not (tmp_path / "tuned").exists()


@pytest.mark.parametrize("how", ["truncated", "magic", "version"])
def test_train_on_a_damaged_shard_is_one_line_naming_it(tmp_path, prepared, capsys, how):
    shard = prepared / "train_000001.bin"
    damage(shard, how)
    code, _, err = train_on(capsys, "--data", str(prepared), "--max-iters", "1", "--out-dir", str(tmp_path / "r"))
    assert code == 1 and err.count("\n") == 1 and err.startswith(f"train: error: {shard} ")


@pytest.mark.parametrize("name, problem", [
    ("", "expected a path, got ''"),
    ("none.txt", "no file or folder none.txt"),
])
def test_an_input_that_is_no_file_or_folder_is_refused_as_it_is_parsed(tmp_path, corpus, capsys, monkeypatch, name,
                                                                       problem):
    """It was looked for only after parsing, with status 1, and '' was the current folder: here a corpus, prepared."""
    monkeypatch.chdir(corpus)
    with pytest.raises(SystemExit) as exit:
        prepare.main([name, "--out", str(tmp_path / "p"), "--tokenizer", "char", "--no-progress"])
    assert (exit.value.code, *capsys.readouterr()) == (
        2, "", f"python -m models.prepare: error: argument PATH: {problem} (see --help)\n")
    assert not (tmp_path / "p").exists()


@pytest.mark.parametrize("given", ["text", "", "none"])
def test_eval_data_that_is_no_prepared_folder_is_refused_as_it_is_parsed(tmp_path, prepared, corpus, capsys,
                                                                         monkeypatch, given):
    """--data FILE (a text file, as train takes) was refused only after parsing, with status 1, and --data '' read
    the current folder: here a prepared one, scored "on the val split of  (…)". train's --data '' read it too."""
    text = next(corpus.rglob("*.txt"))
    path = {"text": str(text), "": "", "none": str(tmp_path / "none")}[given]
    problem = {"text": f"{text} is a file; give a folder that models.prepare made (python -m models.prepare {text} "
                       "--out DIR makes one)",
               "": "expected a path, got ''", "none": f"no folder {tmp_path / 'none'}"}[given]
    monkeypatch.chdir(prepared)
    with pytest.raises(SystemExit) as exit:
        evaluate.main(["--data", path, str(tmp_path), "--no-progress"])  # --data is read before CHECKPOINT
    out, err = capsys.readouterr()
    assert (exit.value.code, out) == (2, "")
    assert err == f"python -m models.eval: error: argument --data: {problem} (see --help)\n"
    if given == "":
        with pytest.raises(SystemExit) as exit:
            train.main(["--data", "", "--out-dir", str(tmp_path / "run")])
        assert exit.value.code == 2 and not (tmp_path / "run").exists()
        assert capsys.readouterr().err == f"python -m models.train: error: argument --data: {problem} (see --help)\n"


def test_eval_checks_the_checksums_of_what_it_reads(tmp_path, prepared, capsys):
    assert train_on(capsys, "--data", str(prepared), "--max-iters", "1", "--out-dir", str(tmp_path / "r"))[0] == 0
    damage(prepared / "val_000000.bin", "token")
    assert evaluate.main([str(tmp_path / "r"), "--data", str(prepared), "--no-progress"]) == 1
    assert capsys.readouterr().err == (f"eval: error: {prepared / 'val_000000.bin'} is damaged: its tokens do not "
                                       "match the checksum meta.json lists for it\n")


def test_eval_a_batch_too_large_for_memory_is_one_line(tmp_path, gpt2_prepared):
    """A --batch-size whose logits (windows × block × 50,257 floats) cannot be allocated ended in NumPy's
    MemoryError as a traceback. Run with its address space capped, so that the allocation fails on any machine."""
    import resource
    with ag.seeded(0):
        GPT(GPTConfig(block_size=64, n_layer=1, n_head=2, n_embd=8)).save_pretrained(tmp_path / "gpt2-tiny")
    cap = 12 * 2 ** 30  # far below the ~60 GiB of logits asked for, far above what the rest of the run needs
    run = subprocess.run([sys.executable, "-m", "models.eval", str(tmp_path / "gpt2-tiny"), "--data",
                          str(gpt2_prepared[1]), "--split", "train", "--stride", "1", "--batch-size", "100000",
                          "--no-progress"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                         preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (cap, cap)))
    assert run.returncode == 1 and run.stdout == "", run.stderr
    assert run.stderr.startswith("eval: error: out of memory (Unable to allocate ") and run.stderr.count("\n") == 1
    assert run.stderr.endswith("); ask for a smaller --batch-size\n")


def test_a_folder_that_was_never_prepared_is_one_line(tmp_path, corpus, capsys):
    with pytest.raises(SystemExit):
        train.main(["--data", str(corpus), "--out-dir", str(tmp_path / "r")])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"python -m models.prepare {corpus} --out DIR" in err


def test_mpi_ranks_read_the_same_shards_and_train_as_one_process(tmp_path, prepared):
    from tests.models import mpi_train
    from tests.models.test_train_mpi import B, TINY as MPI_TINY, assert_same_training, have_mpi, mpiexec
    if not have_mpi():
        pytest.skip("needs the dist extra (mpi4py and an mpiexec): pip install -e \".[dist]\"")
    data = ["--data", str(prepared), "--max-iters", "10"]
    assert mpi_train.main([*MPI_TINY, *data, "--batch-size", str(2 * B), "--out-dir", str(tmp_path / "one")]) == 0
    code, _, err, _ = mpiexec(*MPI_TINY, *data, "--batch-size", str(B), "--out-dir", str(tmp_path / "two"))
    assert code == 0, err
    assert_same_training(tmp_path / "two", tmp_path / "one")
