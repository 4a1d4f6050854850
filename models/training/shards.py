"""Prepared corpora: token shards on disk, and the training data that memory-maps them.

A folder that `python -m models.prepare` made holds

    meta.json              (written last) the tokenizer, the token dtype, the split, every shard with its token count, and
                           every source file with its size and SHA-256
    train_000000.bin, ...  the training split's tokens, in shards of `shard_tokens` tokens (its last one shorter)
    val_000000.bin, ...    the validation split's, likewise

A shard is a 32-byte header and its tokens, little-endian:

    magic     8 bytes   b"GPTGTOKS"
    version   uint32    1
    itemsize  uint32    2 (uint16 tokens) or 4 (uint32)
    count     uint64    how many tokens follow
    crc32     uint32    of the token bytes
    reserved  uint32    0

`read_header` checks a shard against its own header (magic, version, dtype,
size) and `open_shard(verify=True)` against its checksum too; each names the
file and what is wrong in one line. `PreparedData` is `TokenData` over such a
folder: the same `batch(split, rows, block, rng)`, drawing blocks at random
offsets of each split's shards taken end to end, so a corpus larger than memory
trains with flat memory. It maps the shards afresh for every batch, so the
pages a batch read leave the process's resident set with it.

A prepared folder may come from anyone, so nothing in it is trusted: meta.json
is checked field by field, every shard's header against what meta.json lists
for it (type of file, size, dtype, count, checksum) when the folder is opened,
and a shard's tokens against that checksum and the vocabulary when a batch
first reads them, in one streaming pass: start-up reads headers only.
"""
import argparse
import json
import os
import stat
import struct
import zlib
from pathlib import Path

import numpy as np

from models.cli import input_file, input_folder

from models.training.data import TokenData
from models.io import json_type, read_json
from models.gpt.tokenizer import tokenizer_from_dict

MAGIC = b"GPTGTOKS"
VERSION = 1
HEADER = struct.Struct("<8sIIQII")
DTYPES = {2: np.dtype("<u2"), 4: np.dtype("<u4")}  # by itemsize, as the header gives it
DTYPE_NAMES = {dtype.name: dtype for dtype in DTYPES.values()}  # "uint16", "uint32", as meta.json gives it
META_FILE = "meta.json"
PROGRESS_FILE = "prepare_progress.json"  # an unfinished preparation's, until meta.json replaces it
META_FORMAT = 1
SPLITS = ("train", "val")


class ShardError(ValueError):
    """A shard or meta.json that is not what models.prepare writes; the message names the file."""


def token_dtype(vocab_size):
    """uint16 when every id fits in it, else uint32."""
    return DTYPES[2] if vocab_size <= 1 << 16 else DTYPES[4]


def shard_name(split, index):
    return f"{split}_{index:06d}.bin"


class ShardWriter:
    """A shard written as its tokens come: a placeholder header first, the real one (count, checksum) at `close`."""

    def __init__(self, path, dtype):
        self.dtype = np.dtype(dtype).newbyteorder("<")
        if self.dtype not in DTYPES.values():
            raise TypeError(f"ShardWriter: tokens are uint16 or uint32, not {dtype}")
        self.file = open(path, "wb")
        self.file.write(bytes(HEADER.size))
        self.count, self.crc = 0, 0

    def write(self, tokens):
        tokens = np.ascontiguousarray(tokens, dtype=self.dtype)
        self.file.write(tokens.data)
        self.crc = zlib.crc32(tokens, self.crc)
        self.count += len(tokens)

    def close(self):
        """Write the header and close the file; the shard's checksum."""
        self.file.seek(0)
        self.file.write(HEADER.pack(MAGIC, VERSION, self.dtype.itemsize, self.count, self.crc, 0))
        self.file.close()
        return self.crc


def read_header(path):
    """(dtype, count, crc32) from the header of the shard at `path`, checked against the file's size."""
    path = Path(path)
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise ShardError(f"{path} is missing; prepare the folder again with python -m models.prepare") from None
    if not stat.S_ISREG(mode):  # a FIFO would block the open below for ever, a device never end
        raise ShardError(f"{path} is not a regular file (a folder, FIFO or device); a shard is a file that "
                         "python -m models.prepare wrote")
    with open(path, "rb") as f:
        head = f.read(HEADER.size)
    if len(head) < HEADER.size:
        raise ShardError(f"{path} is not a token shard: {len(head)} bytes, shorter than the {HEADER.size}-byte header")
    magic, version, itemsize, count, crc, _ = HEADER.unpack(head)
    if magic != MAGIC:
        raise ShardError(f"{path} is not a token shard (it starts with {magic!r}, not {MAGIC!r})")
    if version != VERSION:
        raise ShardError(f"{path} is a version {version} shard and this models.prepare reads version {VERSION}; "
                         "prepare the corpus again")
    if itemsize not in DTYPES:
        raise ShardError(f"{path}: its header gives {itemsize}-byte tokens; shards hold 2 (uint16) or 4 (uint32)")
    expected, size = HEADER.size + count * itemsize, path.stat().st_size
    if size != expected:
        raise ShardError(f"{path} is {'truncated' if size < expected else 'too long'}: its header gives {count:,} "
                         f"tokens ({expected:,} bytes) but it has {size:,} bytes")
    return DTYPES[itemsize], count, crc


def open_shard(path, verify=False):
    """The tokens of the shard at `path`, memory-mapped read-only; `verify` checks them against the checksum."""
    dtype, count, crc = read_header(path)
    if count == 0:  # nothing to map
        return np.empty(0, dtype=dtype)
    tokens = np.memmap(path, dtype=dtype, mode="r", offset=HEADER.size, shape=(count,))
    if verify and zlib.crc32(tokens) != crc:
        raise ShardError(f"{path} is damaged: its tokens do not match the checksum in its header")
    return tokens


def check_tokens(path, tokens, crc, vocab_size, chunk=1 << 22):
    """A one-line error unless the shard `tokens` of `path` have the checksum `crc` and every id is below
    `vocab_size`: one streaming pass, a chunk at a time, so memory holds one chunk whatever the shard."""
    found, largest = 0, -1
    for start in range(0, len(tokens), chunk):
        part = tokens[start:start + chunk]
        found = zlib.crc32(part, found)
        largest = max(largest, int(part.max()))
    if found != crc:
        raise ShardError(f"{path} is damaged: its tokens do not match the checksum {META_FILE} lists for it")
    if largest >= vocab_size:
        raise ShardError(f"{path} holds the token id {largest}, but its tokenizer has {vocab_size:,} ids "
                         f"(0 to {vocab_size - 1}); the shard comes from another preparation")


class ShardedTokens:
    """One split's tokens: its shards taken end to end, indexed like an array without being loaded.

    With `crcs` and `vocab_size`, a shard's tokens are checked (`check_tokens`)
    the first time they are read; `verified` holds the shards checked so far.
    """

    def __init__(self, paths, dtype, counts, crcs=None, vocab_size=None):
        self.paths, self.dtype = list(paths), dtype
        self.counts = np.asarray(counts, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        self.crcs, self.vocab_size = crcs, vocab_size
        self.verified = set()

    def verify(self, k):
        """Check shard k's tokens, once."""
        if self.crcs is not None and k not in self.verified:
            tokens = self._mapped(k) if self.counts[k] else np.empty(0, dtype=self.dtype)  # nothing to map
            check_tokens(self.paths[k], tokens, self.crcs[k], self.vocab_size)
            self.verified.add(k)

    def __len__(self):
        return int(self.starts[-1])

    def __getitem__(self, index):
        """The tokens at `index` (an integer array, or a slice) as int64, read from the shards that hold them."""
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step != 1:
                raise ValueError(f"ShardedTokens: a slice takes every token (step 1), not every {step}th")
            return self._range(start, max(start, stop))
        index = np.asarray(index)
        out = np.empty(index.shape, dtype=np.int64)
        which = np.searchsorted(self.starts, index, side="right") - 1
        for k in np.unique(which):
            here = which == k
            out[here] = self._map(k)[index[here] - self.starts[k]]
        return out

    def _range(self, start, stop):
        first, last = np.searchsorted(self.starts, [start, stop], side="right") - 1
        pieces = [self._map(k)[max(start - self.starts[k], 0):stop - self.starts[k]]
                  for k in range(first, min(last, len(self.paths) - 1) + 1)]
        return np.concatenate(pieces).astype(np.int64) if pieces else np.empty(0, dtype=np.int64)

    def _map(self, k):
        """Shard k's tokens, checked once, mapped until the caller drops them (then its pages leave this
        process's resident set)."""
        self.verify(k)
        return self._mapped(k)

    def _mapped(self, k):
        return np.memmap(self.paths[k], dtype=self.dtype, mode="r", offset=HEADER.size, shape=(int(self.counts[k]),))


class PreparedData(TokenData):
    """TokenData over a prepared folder: each split's shards, memory-mapped, and the tokenizer that made them.

    The shards' headers are checked against meta.json on opening (a missing,
    truncated, swapped or foreign shard is one line naming it), and each shard's
    tokens against its checksum and the vocabulary before a batch first reads it.
    """

    def __init__(self, folder):  # TokenData's own constructor cuts an array; this one opens shards
        self.folder = Path(folder)
        self.meta = read_meta(self.folder)
        dtype = DTYPE_NAMES[self.meta["dtype"]]
        self.splits = {}
        for split in SPLITS:
            shards = self.meta["splits"][split]["shards"]
            paths = [self.folder / shard["name"] for shard in shards]
            for path, shard in zip(paths, shards):
                found, count, crc = read_header(path)
                if found != dtype or count != shard["tokens"] or crc != shard["crc32"]:
                    raise ShardError(f"{path} holds {count:,} {found} tokens of checksum {crc:08x} but "
                                     f"{self.folder / META_FILE} lists {shard['tokens']:,} {dtype} tokens of "
                                     f"checksum {shard['crc32']:08x}; it comes from another preparation")
            self.splits[split] = ShardedTokens(paths, dtype, [shard["tokens"] for shard in shards],
                                               [shard["crc32"] for shard in shards], self.meta["vocab_size"])

    def check_fits(self, block_size, splits=SPLITS):
        """TokenData's check, but an empty split says why: python -m models.prepare --val-fraction 0 holds out
        none, which models.eval --split train reads but models.train, which estimates val loss, cannot."""
        for split in splits:
            if len(self.splits[split]) == 0:
                fix = ("prepared with --val-fraction 0?); models.train estimates the val loss: prepare it again "
                       "with a --val-fraction above 0" if split == "val" else "); prepare the corpus again")
                raise ValueError(f"{self.folder} holds no {split} tokens ({self.folder / META_FILE} lists no "
                                 f"{split} shard{' with tokens' if self.meta['splits'][split]['shards'] else ''}, "
                                 + fix)
        super().check_fits(block_size, splits)

    def _tokens_crc(self, crc):
        """The CRC-32 of meta.json's list of shards (their token counts and checksums), continued from `crc`:
        reading every token of a corpus bigger than memory, as TokenData does, would take minutes."""
        return zlib.crc32(json.dumps(self.meta["splits"], sort_keys=True).encode(), crc)

    def tokenizer(self):
        """The tokenizer that meta.json describes, whose ids the shards hold (as many as its 'vocab_size')."""
        try:
            made = tokenizer_from_dict(self.meta["tokenizer"])
        except (ValueError, OSError) as exc:
            raise ShardError(f"{self.folder / META_FILE}: 'tokenizer' does not describe a tokenizer ({exc}); "
                             "prepare the corpus again") from None
        check_vocab_size(self, made)
        return made


def check_vocab_size(data, tokenizer):
    """A one-line error unless meta.json's 'vocab_size' is the tokenizer's: the shards' ids are checked against it."""
    if tokenizer.vocab_size != data.meta["vocab_size"]:
        raise ShardError(f"{data.folder / META_FILE}: 'vocab_size' is {data.meta['vocab_size']:,} but its "
                         f"{tokenizer.kind} tokenizer has {tokenizer.vocab_size:,} ids; prepare the corpus again")


def check_tokenizer(data, tokenizer, source):
    """A one-line error unless `tokenizer` (the model's, from `source`) is the one that made the shards of `data`."""
    if tokenizer.to_dict() == data.meta["tokenizer"]:
        check_vocab_size(data, tokenizer)
        return
    made = data.tokenizer()
    same_kind = "another vocabulary of " if made.kind == tokenizer.kind else ""
    # models.prepare takes a character vocabulary from the text itself: no option gives it the model's
    fix = ("a character vocabulary is made from the text itself, so train a new model on it" if same_kind and
           made.kind == "char" else "prepare the text again with that tokenizer, or train a new model on it")
    raise ValueError(f"{data.folder} holds tokens of the {made.kind} tokenizer ({made.vocab_size:,} ids), but the "
                     f"model of {source} reads {same_kind}the {tokenizer.kind} tokenizer ({tokenizer.vocab_size:,} "
                     f"ids); {fix}")


def read_meta(folder):
    """meta.json of a prepared folder, checked for what PreparedData reads, with one-line errors."""
    folder = Path(folder)
    path = folder / META_FILE
    if not path.is_file():
        unfinished = (folder / PROGRESS_FILE).is_file() or any(folder.glob("*.bin"))
        raise ShardError(f"{folder} has no {META_FILE}: " + (
            "its preparation did not finish; run the same python -m models.prepare command again to finish it"
            if unfinished else "it is not a folder that python -m models.prepare made; if it holds text, "
            f"prepare that first: python -m models.prepare {folder} --out DIR, then --data DIR"))
    try:
        meta = read_json(path)
    except ValueError as exc:
        raise ShardError(str(exc)) from None
    if meta.get("format") != META_FORMAT:
        raise ShardError(f"{path} is of format {meta.get('format')!r}; this version reads {META_FORMAT}: "
                         "prepare the corpus again")
    field(path, meta, "tokenizer", dict, "an object")
    field(path, meta, "vocab_size", int, "a positive integer", lambda n: n > 0)
    field(path, meta, "dtype", str, "uint16 or uint32", lambda name: name in DTYPE_NAMES)
    if meta["vocab_size"] > np.iinfo(DTYPE_NAMES[meta["dtype"]]).max + 1:
        raise ShardError(f"{path}: 'vocab_size' {meta['vocab_size']:,} does not fit its 'dtype' {meta['dtype']}")
    field(path, meta, "splits", dict, "an object")
    names = set()
    for split in SPLITS:
        field(path, meta["splits"], split, dict, "an object", prefix="splits.")
        field(path, meta["splits"][split], "shards", list, "an array", prefix=f"splits.{split}.")
        for i, shard in enumerate(meta["splits"][split]["shards"]):
            where = f"splits.{split}.shards[{i}]."
            if not isinstance(shard, dict):
                raise ShardError(f"{path}: '{where[:-1]}' should be an object, not {json_type(shard)}")
            # a plain name of this folder: a path would read a file elsewhere
            # (a NUL, which no file name holds, failed only at the first stat, as "embedded null byte" alone)
            field(path, shard, "name", str, "a shard's file name in the folder",
                  lambda name: Path(name).name == name and name not in ("", ".", "..") and "\0" not in name, where)
            field(path, shard, "tokens", int, "a count of tokens", lambda n: n >= 0, where)
            field(path, shard, "crc32", int, "a CRC-32", lambda n: 0 <= n < 1 << 32, where)
            if shard["name"] in names:
                raise ShardError(f"{path}: '{where}name' lists {shard['name']} a second time; "
                                 "prepare the corpus again")
            names.add(shard["name"])
    return meta


def field(path, obj, key, kind, meaning, fits=lambda value: True, prefix=""):
    """A one-line error naming the file and field unless obj[key] is there, of `kind` (not a bool), and `fits`."""
    if key not in obj:
        raise ShardError(f"{path} lacks '{prefix}{key}'; prepare the corpus again")
    value = obj[key]
    if not isinstance(value, kind) or isinstance(value, bool) or not fits(value):
        shown = json.dumps(value)[:40] if isinstance(value, (int, str)) else json_type(value)
        raise ShardError(f"{path}: '{prefix}{key}' should be {meaning}, not {shown}; prepare the corpus again")


def data_path(text):
    """A `type=` function for --data: a text file (models.cli.input_file's checks), or a folder that
    models.prepare made (prepared_data's)."""
    try:
        folder = bool(text) and Path(text).is_dir()  # Path("") is the current folder; input_file refuses ''
    except OSError:  # a name too long for the system: input_file says so in one line
        folder = False
    return prepared_data(text) if folder else input_file(text)


def prepared_data(text):
    """A `type=` function for models.eval's --data: a folder that models.prepare made (it holds meta.json); a
    text file is refused with the command that prepares it."""
    if os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"{text} is a file; give a folder that models.prepare made "
                                         f"(python -m models.prepare {text} --out DIR makes one)")
    input_folder(text)
    try:
        read_meta(Path(text))
    except (ValueError, OSError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text
