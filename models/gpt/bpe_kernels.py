"""Byte-level BPE encoding compiled by numba: GPT-2's pre-tokenisation and the merges, over a text's UTF-8 bytes.

What this file promises:

* `character_classes()`: for every code point, its class in GPT-2's pattern
  (`SPACE` for the `regex` module's \\s, `LETTER` for \\p{L}, `NUMBER` for
  \\p{N}, `OTHER` for the rest), read off the `regex` module itself, so the
  compiled chunker cannot disagree with the pattern about a character.
* `gpt2_chunk_ends(data, classes)`: where each chunk of GPT2_SPLIT_PATTERN
  ends, in bytes, in the UTF-8 `data` — the chunks `regex.findall` gives.
* `pair_table(ranks, merged_ids)`: the merges as an open-addressing hash
  table in NumPy arrays, pair of ids → its rank and the id it merges into.
* `bpe(data, ends, byte_ids, pairs)`: every chunk's ids, merged by rank.

Why compiled: in Python, merging a word seen for the first time costs
microseconds a pair, which held text never seen before to a fifth of
tiktoken's rate. Compiled, every chunk can go through BPE; `bpe` still
merges a chunk repeated within one call only once (a cache of that call's
own output). The kernels are cached on disk (numba's `cache=True`, where
runtime's `CACHE` found a writable folder): the first run on a machine
compiles them (seconds), later processes load them; the kernels Python calls
are `compiled` ones (autograd/kernels/runtime.py): a Ctrl-C
during their compile or load is held until it ends, and LLVM's code pages are
handed back after.
"""
import functools

import numba
import numpy as np
import regex

from autograd.kernels.runtime import CACHE, compiled  # a Ctrl-C held while they compile, LLVM's pages handed back after

SPACE, LETTER, NUMBER, OTHER = 0, 1, 2, 3
_EMPTY = -1  # a free slot of the pair table
_HASH = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing: 2⁶⁴ / golden ratio, odd
SHORT = 32  # chunks up to this many bytes are merged by scanning (_merge_short), longer ones with a heap
_jit = dict(cache=CACHE, nogil=True)


@functools.cache
def character_classes():
    """Each code point's class (uint8, 0x110000 of them): SPACE, LETTER, NUMBER or OTHER, as `regex` sees it."""
    every_character = np.arange(0x110000, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    classes = np.full(0x110000, OTHER, np.uint8)
    for cls, pattern in ((SPACE, r"\s+"), (LETTER, r"\p{L}+"), (NUMBER, r"\p{N}+")):
        for run in regex.finditer(pattern, every_character):
            classes[run.start():run.end()] = cls
    return classes


@numba.njit(inline="always", **_jit)
def _char(data, i, classes):
    """The class of the character whose UTF-8 starts at data[i], and its length in bytes (valid UTF-8 assumed)."""
    lead = data[i]
    if lead < 0x80:
        return classes[lead], 1
    if lead < 0xE0:
        return classes[(lead & 0x1F) << 6 | data[i + 1] & 0x3F], 2
    if lead < 0xF0:
        return classes[(lead & 0x0F) << 12 | (data[i + 1] & 0x3F) << 6 | data[i + 2] & 0x3F], 3
    return classes[(lead & 0x07) << 18 | (data[i + 1] & 0x3F) << 12 | (data[i + 2] & 0x3F) << 6
                   | data[i + 3] & 0x3F], 4


@numba.njit(**_jit)
def _contraction(data, i):
    """The length of the contraction ('s 't 're 've 'm 'll 'd) at data[i], or 0."""
    n = len(data)
    if data[i] != 39 or i + 1 == n:  # "'"
        return 0
    second = data[i + 1]
    if second == 115 or second == 116 or second == 109 or second == 100:  # s t m d
        return 2
    if i + 2 < n:
        third = data[i + 2]
        if (second == 114 and third == 101) or (second == 118 and third == 101) or (second == 108 and third == 108):
            return 3  # re ve ll
    return 0


@compiled
@numba.njit(**_jit)
def gpt2_chunk_ends(data, classes):
    """The end (in bytes) of each chunk of GPT-2's pattern in the UTF-8 `data`, in order.

    The pattern's alternatives, tried in its order at each chunk's start:
    a contraction; one optional space and a run of letters, or of digits,
    or of other characters; a run of whitespace that leaves its last
    character to the chunk after it (where one follows: `\\s+(?!\\S)`); a
    single whitespace character before a non-space (`\\s+`).
    """
    n = len(data)
    ends = np.empty(n // 4 + 16, np.int64)  # a chunk of English is about 4 bytes; grown when more come
    count = 0
    i = 0
    while i < n:
        if count == len(ends):
            ends = _grown(ends, count)
        end = i + _contraction(data, i)
        if end == i:
            cls, width = _char(data, i, classes)
            start = i
            if data[i] == 32 and i + 1 < n:  # a space joins the run of non-space after it
                after, after_width = _char(data, i + 1, classes)
                if after != SPACE:
                    cls, width, start = after, after_width, i + 1
            end = start + width
            if cls != SPACE:
                while end < n:
                    next_cls, next_width = _char(data, end, classes)
                    if next_cls != cls:
                        break
                    end += next_width
            else:
                last = i  # where the run's last whitespace character starts
                while end < n:
                    next_cls, next_width = _char(data, end, classes)
                    if next_cls != SPACE:
                        break
                    last = end
                    end += next_width
                if end < n and last > i:
                    end = last
        ends[count] = end
        count += 1
        i = end
    return ends[:count]


@numba.njit(**_jit)
def _grown(array, count):
    """A copy of array[:count] with room for twice as many items."""
    grown = np.empty(2 * len(array), array.dtype)
    grown[:count] = array[:count]
    return grown


@numba.njit(**_jit)
def _slot(table, shift, key):
    """Where `key` is in the pair table, or the free slot where it would go (linear probing)."""
    mask = len(table) - 1
    slot = np.int64((np.uint64(key) * _HASH) >> np.uint64(shift))
    while table[slot, 0] != key and table[slot, 0] != _EMPTY:
        slot = (slot + 1) & mask
    return slot


@compiled
@numba.njit(**_jit)
def _fill_table(lefts, rights, ranks, merged, pairs):
    """Put merge k, (lefts[k], rights[k]) → (ranks[k], merged[k]), into the pair table, for every k."""
    table, shift, width = pairs
    for k in range(len(lefts)):
        key = lefts[k] * width + rights[k]
        slot = _slot(table, shift, key)
        table[slot, 0], table[slot, 1], table[slot, 2] = key, ranks[k], merged[k]


def pair_table(ranks, merged_ids):
    """The merges {(left, right): rank} and {(left, right): merged id} as an open-addressing hash table at
    most half full: (rows of key, rank, merged id; the hash's shift; width), a pair's key being
    left · width + right. A row is one lookup's only read from memory."""
    pairs = np.array(list(ranks), dtype=np.int64).reshape(-1, 2)
    width = int(pairs.max()) + 1 if len(pairs) else 1
    bits = max(4, (2 * len(pairs)).bit_length())
    table = np.full((1 << bits, 3), _EMPTY, np.int64)
    _fill_table(pairs[:, 0].copy(), pairs[:, 1].copy(), np.array(list(ranks.values()), np.int64),
                np.array([merged_ids[pair] for pair in ranks], np.int64), (table, 64 - bits, width))
    return table, 64 - bits, width


@numba.njit(inline="always", **_jit)
def _rank(pairs, left, right):
    """The row of the merge (left, right) in the pair table, and its rank; -1 for both where it is no merge."""
    table, shift, width = pairs
    if left >= width or right >= width:
        return -1, -1
    slot = _slot(table, shift, left * width + right)
    return (slot, table[slot, 1]) if table[slot, 0] != _EMPTY else (-1, -1)


@numba.njit(**_jit)
def _push(heap, size, item):
    """Add `item` to the min-heap heap[:size] (it then holds size + 1 items)."""
    heap[size] = item
    while size > 0 and heap[(size - 1) >> 1] > heap[size]:
        parent = (size - 1) >> 1
        heap[parent], heap[size] = heap[size], heap[parent]
        size = parent


@numba.njit(**_jit)
def _pop(heap, size):
    """The smallest item of heap[:size] (size − 1 items are left)."""
    top = heap[0]
    size -= 1
    heap[0] = heap[size]
    i = 0
    while True:
        child = 2 * i + 1
        if child >= size:
            break
        if child + 1 < size and heap[child + 1] < heap[child]:
            child += 1
        if heap[i] <= heap[child]:
            break
        heap[i], heap[child] = heap[child], heap[i]
        i = child
    return top


@numba.njit(**_jit)
def _merge_short(data, start, m, byte_ids, pairs, out, at, ids, ranks):
    """The BPE of the chunk data[start:start + m], written to out[at:]; how many ids it is. For short chunks:
    ids[:m] holds the tokens and ranks[:m - 1] their pairs' ranks (-1: no merge), and each step scans for
    the lowest (the leftmost of equals), merges it and closes the gap. O(m²), and the fastest for a word."""
    table = pairs[0]
    for i in range(m):
        ids[i] = byte_ids[data[start + i]]
    for i in range(m - 1):
        ranks[i] = _rank(pairs, ids[i], ids[i + 1])[1]
    while m > 1:
        best = -1
        for i in range(m - 1):
            if ranks[i] >= 0 and (best < 0 or ranks[i] < ranks[best]):
                best = i
        if best < 0:
            break
        ids[best] = table[_rank(pairs, ids[best], ids[best + 1])[0], 2]
        m -= 1
        for i in range(best + 1, m):
            ids[i] = ids[i + 1]
            ranks[i] = ranks[i + 1]
        if best + 1 < m:
            ranks[best] = _rank(pairs, ids[best], ids[best + 1])[1]
        if best > 0:
            ranks[best - 1] = _rank(pairs, ids[best - 1], ids[best])[1]
    out[at:at + m] = ids[:m]
    return m


@numba.njit(**_jit)
def _merge_long(data, start, m, byte_ids, pairs, out, at, ids, right, left, heap):
    """`_merge_short`'s result in O(m log m), for long chunks. The tokens are a linked list over the chunk's
    bytes: token i (named by its first byte) is followed by token right[i], while i < m; left[i] is -1 once
    i is merged into the token before it.

    A min-heap holds rank · 2³² + i for each adjacent pair (i, right[i]) that
    is a merge; the lowest pops first, the leftmost of equal ranks. An entry
    is stale once either of its tokens has changed, which the pair's rank,
    looked up again, shows.
    """
    table = pairs[0]
    for i in range(m):
        ids[i] = byte_ids[data[start + i]]
        right[i], left[i] = i + 1, i - 1
    size = 0
    for i in range(m - 1):
        r = _rank(pairs, ids[i], ids[i + 1])[1]
        if r >= 0:
            _push(heap, size, r << 32 | i)
            size += 1
    while size:
        item = _pop(heap, size)
        size -= 1
        r, i = item >> 32, item & 0xFFFFFFFF
        j = right[i]
        if (i > 0 and left[i] < 0) or j >= m:
            continue
        slot, now = _rank(pairs, ids[i], ids[j])
        if now != r:
            continue
        ids[i] = table[slot, 2]
        left[j] = -1
        j = right[i] = right[j]
        if j < m:
            left[j] = i
            r = _rank(pairs, ids[i], ids[j])[1]
            if r >= 0:
                _push(heap, size, r << 32 | i)
                size += 1
        if i > 0:
            r = _rank(pairs, ids[left[i]], ids[i])[1]
            if r >= 0:
                _push(heap, size, r << 32 | left[i])
                size += 1
    k, i = 0, 0
    while i < m:
        out[at + k] = ids[i]
        k += 1
        i = right[i]
    return k


@compiled
@numba.njit(**_jit)
def bpe(data, ends, byte_ids, pairs):
    """The ids of the chunks data[ends[k-1]:ends[k]], in order: each chunk's bytes as byte ids, then, while
    some adjacent pair is a merge, the lowest-ranked pair (the leftmost of equals) merged. A merge's new
    pairs rank after it (their token did not exist before it), so merging one pair at a time is merging
    every occurrence at once, left to right, as GPT-2 does.

    Words repeat: a direct-mapped cache, by a hash of the chunk's bytes,
    remembers where a chunk's ids were last written, and a chunk equal to it
    copies them. It lives for one call, over `out`, so it holds no memory.
    """
    out = np.empty(len(data) // 2 + 16, np.int64)  # English is about 0.3 tokens a byte; grown when more come
    longest = 0
    start = 0
    for end in ends:
        longest = max(longest, end - start)
        start = end
    ids = np.empty(longest, np.int64)
    ranks = np.empty(min(longest, SHORT), np.int64)
    right = np.empty(longest if longest > SHORT else 0, np.int64)
    left = np.empty(len(right), np.int64)
    heap = np.empty(2 * len(right), np.int64)  # a merge pops one entry and pushes at most two
    slots = 16
    while slots < min(len(ends), 1 << 16):
        slots <<= 1
    cached = np.full((slots, 4), -1, np.int64)  # chunk's start in data, its length, its ids' start in out, count
    count = 0
    start = 0
    for end in ends:
        m = end - start
        while count + m > len(out):  # a chunk of m bytes has at most m ids
            out = _grown(out, count)
        h = np.uint64(14695981039346656037)  # FNV-1a
        for i in range(start, end):
            h = (h ^ np.uint64(data[i])) * np.uint64(1099511628211)
        slot = np.int64(h >> np.uint64(40)) & (slots - 1)
        seen, k = cached[slot, 0], cached[slot, 3]
        same = cached[slot, 1] == m
        i = 0
        while same and i < m:
            same = data[seen + i] == data[start + i]
            i += 1
        if same:
            for i in range(k):
                out[count + i] = out[cached[slot, 2] + i]
        else:
            if m <= SHORT:
                k = _merge_short(data, start, m, byte_ids, pairs, out, count, ids, ranks)
            else:
                k = _merge_long(data, start, m, byte_ids, pairs, out, count, ids, right, left, heap)
            cached[slot, 0], cached[slot, 1], cached[slot, 2], cached[slot, 3] = start, m, count, k
        count += k
        start = end
    return out[:count]
