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
"""
import argparse
import json
import struct
import zlib
from pathlib import Path

import numpy as np

from models.cli import input_file

from models.training.data import TokenData
from models.io import read_json
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
        with open(path, "rb") as f:
            head = f.read(HEADER.size)
    except FileNotFoundError:
        raise ShardError(f"{path} is missing; prepare the folder again with python -m models.prepare") from None
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


class ShardedTokens:
    """One split's tokens: its shards taken end to end, indexed like an array without being loaded."""

    def __init__(self, paths, dtype, counts):
        self.paths, self.dtype = list(paths), dtype
        self.counts = np.asarray(counts, dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])

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
        """Shard k's tokens, mapped until the caller drops them (then its pages leave this process's resident set)."""
        return np.memmap(self.paths[k], dtype=self.dtype, mode="r", offset=HEADER.size, shape=(int(self.counts[k]),))


class PreparedData(TokenData):
    """TokenData over a prepared folder: each split's shards, memory-mapped, and the tokenizer that made them.

    The shards' headers are checked against meta.json on opening (a missing,
    truncated or foreign shard is one line naming it); their checksums are
    models.eval's and models.prepare's to check, which read them through.
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
                found, count, _ = read_header(path)
                if found != dtype or count != shard["tokens"]:
                    raise ShardError(f"{path} holds {count:,} {found} tokens but {self.folder / META_FILE} lists "
                                     f"{shard['tokens']:,} {dtype} tokens; it comes from another preparation")
            self.splits[split] = ShardedTokens(paths, dtype, [shard["tokens"] for shard in shards])

    def _tokens_crc(self, crc):
        """The CRC-32 of meta.json's list of shards (their token counts and checksums), continued from `crc`:
        reading every token of a corpus bigger than memory, as TokenData does, would take minutes."""
        return zlib.crc32(json.dumps(self.meta["splits"], sort_keys=True).encode(), crc)

    def tokenizer(self):
        """The tokenizer that meta.json describes, whose ids the shards hold."""
        try:
            return tokenizer_from_dict(self.meta["tokenizer"])
        except (KeyError, TypeError, ValueError, OSError) as exc:
            raise ShardError(f"{self.folder / META_FILE}: 'tokenizer' does not describe a tokenizer ({exc})") from None


def check_tokenizer(data, tokenizer, source):
    """A one-line error unless `tokenizer` (the model's, from `source`) is the one that made the shards of `data`."""
    if tokenizer.to_dict() == data.meta["tokenizer"]:
        return
    made = data.tokenizer()
    same_kind = "another vocabulary of " if made.kind == tokenizer.kind else ""
    raise ValueError(f"{data.folder} holds tokens of the {made.kind} tokenizer ({made.vocab_size:,} ids), but the "
                     f"model of {source} reads {same_kind}the {tokenizer.kind} tokenizer ({tokenizer.vocab_size:,} "
                     f"ids); prepare the text again with that tokenizer, or train a new model on it")


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
    meta = read_json(path)
    if meta.get("format") != META_FORMAT:
        raise ShardError(f"{path} is of format {meta.get('format')!r}; this version reads {META_FORMAT}: "
                         "prepare the corpus again")
    try:
        dtype_ok = meta["dtype"] in DTYPE_NAMES
        shards_ok = all(isinstance(shard["name"], str) and isinstance(shard["tokens"], int)
                        for split in SPLITS for shard in meta["splits"][split]["shards"])
        tokenizer_ok = isinstance(meta["tokenizer"], dict)
    except (KeyError, TypeError) as exc:
        raise ShardError(f"{path} lacks {exc}; prepare the corpus again") from None
    if not (dtype_ok and shards_ok and tokenizer_ok):
        raise ShardError(f"{path} is damaged: 'dtype' should be uint16 or uint32, every shard a name and a token "
                         "count, 'tokenizer' an object; prepare the corpus again")
    return meta


def data_path(text):
    """A `type=` function for --data: a text file (models.cli.input_file's checks), or a folder that
    models.prepare made (it holds meta.json)."""
    try:
        folder = Path(text).is_dir()
    except OSError:  # a name too long for the system: input_file says so in one line
        folder = False
    if not folder:
        return input_file(text)
    try:
        read_meta(Path(text))
    except (ShardError, OSError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text
