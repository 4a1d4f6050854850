"""Fused CPU kernels, compiled by numba: one pass over each row where NumPy makes several with temporaries.

The CPU twin of cuda.py, with the same launchers (kernels.fused()
hands an op either): each kernel computes exactly the formula its op states
(ops.py has the Jacobians, nn/optim.py AdamW's update) and names it in its
docstring. They are float32 only: float64 is this project's checking
precision, and stays on the composed NumPy path that the gradient checks
test; tests/autograd/test_cpu_kernels.py checks every kernel against that
path in float32. AUTOGRAD_FUSED=0 switches them off, as it does the GPU's.

Why they pay: NumPy runs `(x − μ)·rstd·γ + β` as five single-threaded passes
with a temporary each; here each row is read once or twice from cache, and
on arrays large enough (PARALLEL_FROM) rows are spread over the threads.
NumPy's exp is SIMD; a loop calling libm's is not, so the exponentials go
through `_exp32`, a polynomial LLVM vectorises (relative error below 2e-7,
about float32's own).

One answer: a kernel gives the same bits on any thread count, compiled
afresh or loaded from the cache, idle or under load. There is no fast math
(LLVM reordered each compilation's row sums its own way), sums run as eight
fixed running sums (`_sum`, `_dot`), multiply-adds are fused by the CPU's
choice alone (`_mul_add`), and a split product's blocks follow its shape,
not the thread count (`_block`). Compiled for any CPU with FMA (AVX2 or
AVX-512) they give the same bits too; one without FMA rounds each multiply-add
twice. The tests compile them for this CPU, for AVX2 and for x86-64 without
extensions, and compare the first two.

Threads, the pool shared with OpenBLAS (SHARED_POOL) and the compilations
are runtime.py's. With the shared pool the matrix products run here too,
each thread calling OpenBLAS on its block (`matmul`); without it numba's
sleeping "workqueue" threads take 100–400 µs to wake, so only arrays of
millions of elements are split there.
"""
import functools
import math
import types

import llvmlite.binding
import numba
import numpy as np
from llvmlite import ir
from numba import prange
from numba.core import cgutils, types as nbtypes
from numba.extending import intrinsic, overload

from . import runtime
from .runtime import JIT as _jit, jitted as _jitted, pool_threads

SHARED_POOL = runtime.shared_pool()
_F32 = np.float32
ROW_BLOCKS = 64  # layer norm backward: dγ, dβ summed over this many fixed blocks of rows, so the order never varies
# Elements from which a kernel runs on every thread. With the shared pool its threads are awake (spinning) and a
# split pays from about 32K elements; numba's sleeping "workqueue" threads cost 100–400 µs to wake, which pays only
# for work of several milliseconds (measured: none at 1M elements, 1.8× at 6.4M): GPT-2's logits.
PARALLEL_FROM = 1 << 15 if SHARED_POOL else 1 << 21


class _Kernel:
    """One kernel compiled twice from one source: on this thread, and over the threads (`prange` loops split),
    for arrays of at least PARALLEL_FROM elements (the first argument's), where it pays for waking them. Both
    compute every element in the order the source writes it (no fast math): the same bits either way.

    The first call for a kind of arguments compiles (or loads) both forms: the pool narrows to one thread whenever
    other processes keep the cores busy, and a serial form compiled only then stopped a warm run's step for
    seconds (a 60-step run took 16 s instead of 8: docs/performance.md)."""

    def __init__(self, fn):
        parallel = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
        parallel.__qualname__ = f"{fn.__qualname__}_parallel"  # its own file in numba's cache
        serial, parallel = numba.njit(**_jit)(fn), numba.njit(parallel=True, **_jit)(parallel)
        self.serial, self.parallel = runtime.compiled(serial, parallel), runtime.compiled(parallel, serial)
        self.__doc__ = fn.__doc__

    def __call__(self, first, *rest):
        return self.over(first.size)(first, *rest)

    def over(self, size):
        """The form for `size` elements of work, where the first argument's size does not tell it."""
        return self.parallel if size >= PARALLEL_FROM and pool_threads() > 1 else self.serial


@_jitted()
def _address(array):
    """Where `array`'s first element is: a numba call costs about 0.3 µs, NumPy's `.ctypes.data` about 1."""
    return array.ctypes.data


def _addresses(*columns):
    """(columns, arrays) int64: row j holds the addresses of the arrays in `columns[j]`, in their order."""
    return np.array([_address(a) for column in columns for a in column], np.int64).reshape(len(columns), -1)


def _apart(like, *inputs):
    """An empty array shaped as `like`, placed at least 512 bytes (mod 4 KB) from each of the (at most three)
    arrays a kernel reads while writing it. Where an output starts a multiple of 4 KB plus a few bytes after an
    input, every store to it looks to the CPU as if it might feed the next loads of the input ("4K aliasing"),
    and the loop runs 6–10 times slower: equal-sized blocks from the allocator often land exactly so."""
    n = like.size
    buffer = np.empty(n + 4096 // like.itemsize, dtype=like.dtype)
    base = _address(buffer)
    # 8 places 512 bytes apart in the page; an input r bytes into it is nearer than 512 bytes only to the two
    # places around r, so with three inputs two places at least are free
    near = 0
    for a in inputs:
        place = (_address(a) - base) % 4096 // 512
        near |= 3 << place  # place and place + 1 (bit 8 is place 0, a page on)
    near |= near >> 8
    shift = next(p for p in range(8) if not near >> p & 1) * 512 // like.itemsize
    return buffer[shift:shift + n].reshape(like.shape)


# ---- exp in float32, vectorisable ----------------------------------------------


@intrinsic
def _float_from_bits(typingctx, bits):
    """The float32 whose IEEE bits are the int32 `bits` (a reinterpretation, no conversion)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.FloatType())
    return nbtypes.float32(nbtypes.int32), codegen


@intrinsic
def _mul_add(typingctx, a, b, c):
    """a·b + c for float32: one fused multiply-add (one rounding) where the CPU has the instruction, else a multiply
    and an add. LLVM's fmuladd makes that choice by the target alone, so every compilation for one CPU agrees;
    fast math's "contract" would let each compilation fuse where it likes."""
    def codegen(context, builder, signature, args):
        f32 = ir.FloatType()
        fmuladd = builder.module.declare_intrinsic("llvm.fmuladd", [f32], ir.FunctionType(f32, [f32, f32, f32]))
        return builder.call(fmuladd, args)
    return nbtypes.float32(nbtypes.float32, nbtypes.float32, nbtypes.float32), codegen


@numba.njit(inline="always", **_jit)
def _exp32(x):
    """eˣ for float32 x: eˣ = 2ᵏ eʳ with k = round(x log₂e), r = x − k ln 2 in [−ln2/2, ln2/2], and
    eʳ by its degree-7 (minimax) polynomial; 2ᵏ as the product of two powers of two built from their
    exponent bits, so that subnormal results and those near the largest float32 come out right.
    0 below −104 and inf above 88.73, as in NumPy; NaN for NaN."""
    v = min(max(x, _F32(-104)), _F32(88.73))
    k = np.floor(v * _F32(1.4426950408889634) + _F32(0.5))
    r = v - k * _F32(0.693359375) + k * _F32(2.12194440e-4)  # ln 2 in two pieces: r exact to float32
    p = _mul_add(_F32(1.9875691500e-4), r, _F32(1.3981999507e-3))  # Horner's rule
    p = _mul_add(p, r, _F32(8.3334519073e-3))
    p = _mul_add(p, r, _F32(4.1665795894e-2))
    p = _mul_add(p, r, _F32(1.6666665459e-1))
    p = _mul_add(p, r, _F32(5.0000001201e-1))
    half = np.int32(k) >> 1
    e = (_mul_add(p * r, r, r) + _F32(1)) * _float_from_bits((half + 127) << 23) * _float_from_bits(
        (np.int32(k) - half + 127) << 23)
    if x < _F32(-104):
        e = _F32(0)
    if x > _F32(88.73):
        e = _F32(np.inf)
    if x != x:
        e = x
    return e


# ---- sums in a fixed order -----------------------------------------------------------
# Every row sum runs as eight running sums, of the elements j ≡ 0 … 7 (mod 8), the rest into the first, and the
# eight added pairwise at the end: one order on every compilation and CPU. On a contiguous row the eight are one
# 8-wide vector, written here in LLVM's IR (LLVM left the eight scalar sums scalar: a third of the speed); on a
# strided row, eight scalars. The same adds in the same order: the same bits either way.

_LANES = 8


def _fixed_order_sum(builder, n, term):
    """IR for Σⱼ term(j) over j < n in the order above; term(j, width) is the `width` terms from j on, as one
    float (width 1) or one vector of `width`."""
    f32 = ir.FloatType()
    lanes = ir.VectorType(f32, _LANES)
    running = cgutils.alloca_once_value(builder, ir.Constant(lanes, [0.0] * _LANES))
    zero = ir.Constant(n.type, 0)
    n = builder.select(builder.icmp_signed("<", n, zero), zero, n)  # a negative n sums nothing
    steps = builder.ashr(n, ir.Constant(n.type, 3))  # n // 8
    with cgutils.for_range(builder, steps) as loop:
        j = builder.mul(loop.index, ir.Constant(n.type, _LANES))
        builder.store(builder.fadd(builder.load(running), term(j, _LANES)), running)
    sums = [builder.extract_element(builder.load(running), ir.Constant(ir.IntType(32), k)) for k in range(_LANES)]
    first = cgutils.alloca_once_value(builder, sums[0])
    with cgutils.for_range_slice(builder, builder.mul(steps, ir.Constant(n.type, _LANES)), n,
                                 ir.Constant(n.type, 1)) as (j, _):
        builder.store(builder.fadd(builder.load(first), term(j, 1)), first)
    s0, s1, s2, s3, s4, s5, s6, s7 = [builder.load(first)] + sums[1:]
    add = builder.fadd
    return add(add(add(s0, s1), add(s2, s3)), add(add(s4, s5), add(s6, s7)))


def _loader(context, builder, array_type, array):
    """load(j, width): `width` float32 of a contiguous 1-D array from element j on (one float for width 1)."""
    data = context.make_array(array_type)(context, builder, array).data

    def load(j, width):
        at = builder.gep(data, [j])
        if width == 1:
            return builder.load(at, align=4)
        return builder.load(builder.bitcast(at, ir.VectorType(ir.FloatType(), width).as_pointer()), align=4)
    return load


def _splat(builder, value, width):
    """`value` as one float (width 1) or in every lane of a vector of `width`."""
    if width == 1:
        return value
    vector = ir.VectorType(value.type, width)
    one = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return builder.shuffle_vector(one, ir.Constant(vector, ir.Undefined),
                                  ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))


def _contiguous_float32(*arrays):
    return all(isinstance(a, nbtypes.Array) and a.ndim == 1 and a.layout == "C" and a.dtype == nbtypes.float32
               for a in arrays)


@intrinsic
def _sum_lanes(typingctx, a, n):
    """_sum of a contiguous row, eight lanes at a time."""
    if not _contiguous_float32(a):
        return None

    def codegen(context, builder, signature, args):
        return _fixed_order_sum(builder, args[1], _loader(context, builder, signature.args[0], args[0]))
    return nbtypes.float32(a, nbtypes.intp), codegen


@intrinsic
def _dot_lanes(typingctx, a, b, centre, scale, n):
    """_dot of contiguous rows, eight lanes at a time."""
    if not _contiguous_float32(a, b):
        return None

    def codegen(context, builder, signature, args):
        load_a, load_b = (_loader(context, builder, t, x) for t, x in zip(signature.args[:2], args[:2]))

        def term(j, width):  # a[j] · ((b[j] − centre) · scale)
            centred = builder.fsub(load_b(j, width), _splat(builder, args[2], width))
            return builder.fmul(load_a(j, width), builder.fmul(centred, _splat(builder, args[3], width)))
        return _fixed_order_sum(builder, args[4], term)
    return nbtypes.float32(a, b, nbtypes.float32, nbtypes.float32, nbtypes.intp), codegen


@numba.njit(inline="always", **_jit)
def _sum_strided(a, n):
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = _F32(0)
    j = 0
    while j + 8 <= n:
        s0 += a[j]
        s1 += a[j + 1]
        s2 += a[j + 2]
        s3 += a[j + 3]
        s4 += a[j + 4]
        s5 += a[j + 5]
        s6 += a[j + 6]
        s7 += a[j + 7]
        j += 8
    while j < n:
        s0 += a[j]
        j += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


@numba.njit(inline="always", **_jit)
def _dot_strided(a, b, centre, scale, n):
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = _F32(0)
    j = 0
    while j + 8 <= n:
        s0 += a[j] * ((b[j] - centre) * scale)
        s1 += a[j + 1] * ((b[j + 1] - centre) * scale)
        s2 += a[j + 2] * ((b[j + 2] - centre) * scale)
        s3 += a[j + 3] * ((b[j + 3] - centre) * scale)
        s4 += a[j + 4] * ((b[j + 4] - centre) * scale)
        s5 += a[j + 5] * ((b[j + 5] - centre) * scale)
        s6 += a[j + 6] * ((b[j + 6] - centre) * scale)
        s7 += a[j + 7] * ((b[j + 7] - centre) * scale)
        j += 8
    while j < n:
        s0 += a[j] * ((b[j] - centre) * scale)
        j += 1
    return ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))


def _sum(a, n):
    """a[0] + … + a[n−1] in the fixed order above (for kernels: numba compiles the overload below)."""


def _dot(a, b, centre, scale, n):
    """Σⱼ a[j]·((b[j] − centre)·scale) over j < n in _sum's order (centre 0 and scale 1: the plain dot product)."""


@overload(_sum, inline="always", jit_options=_jit)
def _sum_overload(a, n):
    return (lambda a, n: _sum_lanes(a, n)) if _contiguous_float32(a) else (lambda a, n: _sum_strided(a, n))


@overload(_dot, inline="always", jit_options=_jit)
def _dot_overload(a, b, centre, scale, n):
    if _contiguous_float32(a, b):
        return lambda a, b, centre, scale, n: _dot_lanes(a, b, centre, scale, n)
    return lambda a, b, centre, scale, n: _dot_strided(a, b, centre, scale, n)


# ---- matrix products, over the shared pool -----------------------------------------

if SHARED_POOL:
    llvmlite.binding.load_library_permanently(runtime.blas()[0])  # where compiled (and cached) kernels find _SGEMM
    _I64 = nbtypes.int64
    _sgemm = nbtypes.ExternalFunction(runtime.SGEMM, nbtypes.void(  # cblas_sgemm: row-major C = αAB + βC
        nbtypes.int32, nbtypes.int32, nbtypes.int32, _I64, _I64, _I64, nbtypes.float32, nbtypes.voidptr, _I64,
        nbtypes.voidptr, _I64, nbtypes.float32, nbtypes.voidptr, _I64))
    _sgemv = nbtypes.ExternalFunction(runtime.SGEMV, nbtypes.void(  # cblas_sgemv: row-major y = αAx + βy
        nbtypes.int32, nbtypes.int32, _I64, _I64, nbtypes.float32, nbtypes.voidptr, _I64, nbtypes.voidptr, _I64,
        nbtypes.float32, nbtypes.voidptr, _I64))
_ROW_MAJOR, _N, _T = np.int32(101), np.int32(111), np.int32(112)  # CBLAS's order and transposes
SPLIT_FROM = 1 << 20  # multiply-adds from which a product is split into blocks; below, one OpenBLAS call
# A split product's blocks depend on its shape alone, never on the thread count, so that every element of the
# result comes from the same OpenBLAS call (of the same shape) on one thread or on sixteen: OpenBLAS picks its
# inner kernels by the call's shape, and they round differently. One block for each BLOCK_MACS multiply-adds, a
# power of two of them, at most MAX_BLOCKS (each block packs the operand it shares with the others once more).
BLOCK_MACS, MAX_BLOCKS = 1 << 25, 8


@numba.njit(inline="always", **_jit)
def _block(span, macs, least):
    """(rows per block, blocks) for cutting `span` rows of a product of `macs` multiply-adds into whole 16-row
    tiles: at least `least` blocks (where there are that many tiles), a power of two."""
    blocks = least
    while blocks < MAX_BLOCKS and blocks * 2 * BLOCK_MACS <= macs:
        blocks *= 2
    per = ((span + blocks - 1) // blocks + 15) // 16 * 16
    return per, (span + per - 1) // per


@numba.njit(inline="always", **_jit)
def _cut(a, c, ta, least):
    """(rows or columns per block, blocks, by rows) of the product c = op(a) op(b): _block's cut of c's rows, or of
    its columns when it is wider than tall."""
    m, n = c.shape
    k = a.shape[0] if ta else a.shape[1]
    by_rows = m >= n
    per, blocks = _block(m if by_rows else n, m * n * k, least)
    return per, blocks, by_rows


@numba.njit(inline="always", **_jit)
def _product_block(a, b, bias, c, ta, tb, part, per, by_rows):
    """Block `part` of _cut's blocks of c = op(a) op(b) + bias: one OpenBLAS call, and the bias added to the block
    while it is in cache."""
    m, n = c.shape
    k = a.shape[0] if ta else a.shape[1]
    lda, ldb = a.shape[1], b.shape[1]
    lo = part * per
    hi = min(m if by_rows else n, lo + per)
    if by_rows:
        first = a[:, lo:] if ta else a[lo:]
        _sgemm(_ROW_MAJOR, _T if ta else _N, _T if tb else _N, hi - lo, n, k, _F32(1), first.ctypes, lda,
               b.ctypes, ldb, _F32(0), c[lo:].ctypes, n)
        if bias.size:
            for i in range(lo, hi):
                for j in range(n):
                    c[i, j] += bias[j]
    else:
        second = b[lo:] if tb else b[:, lo:]
        _sgemm(_ROW_MAJOR, _T if ta else _N, _T if tb else _N, m, hi - lo, k, _F32(1), a.ctypes, lda,
               second.ctypes, ldb, _F32(0), c[:, lo:].ctypes, n)
        if bias.size:
            for i in range(m):
                for j in range(lo, hi):
                    c[i, j] += bias[j]


@_jitted(parallel=True)
def _matmul(a, b, bias, c, ta, tb):
    """c = op(a) op(b) + bias (bias of n elements, added to every row; empty for none), op(x) = xᵀ where ta (tb)
    is set, every array C-contiguous: c's rows (or its columns, when it is wider than tall) cut into _block's
    blocks, one OpenBLAS call for each, the blocks shared among the threads; each adds the bias to its block
    while it is in cache. Each element of c is one call's dot product over all of k, and the blocks depend on
    the shapes alone: the same bits on any thread count (a block's kernel may round differently from one call's
    over the whole product, by float32's last bit or so)."""
    per, blocks, by_rows = _cut(a, c, ta, 2)  # two at least: the products of a small model still use two cores
    for part in prange(blocks):
        _product_block(a, b, bias, c, ta, tb, part, per, by_rows)


@_jitted(parallel=True)
def _matmul_pair(a1, b1, c1, ta1, tb1, a2, b2, c2, ta2, tb2):
    """c1 = op(a1) op(b1) and c2 = op(a2) op(b2), as _matmul computes each, in one pass over the threads: the
    blocks of both (one at least each, by shape alone) shared among them."""
    none = np.empty(0, c1.dtype)
    per1, blocks1, by_rows1 = _cut(a1, c1, ta1, 1)
    per2, blocks2, by_rows2 = _cut(a2, c2, ta2, 1)
    for part in prange(blocks1 + blocks2):
        if part < blocks1:
            _product_block(a1, b1, none, c1, ta1, tb1, part, per1, by_rows1)
        else:
            _product_block(a2, b2, none, c2, ta2, tb2, part - blocks1, per2, by_rows2)


@_jitted(parallel=True)
def _vecmat(x, b, bias, y, tb):
    """y = x op(b) + bias for one row x (k elements), as _matmul takes b and bias: y cut into _block's blocks of
    columns, one OpenBLAS matrix-vector product each. A matrix product of one row first copies (packs) its block
    of b, which a token's step reads only once: 2.5–3.5× slower (GPT-2's LM head, one row by 768 × 50257:
    18.3–19.4 against 6.0–6.3 ms)."""
    n, k = y.size, x.size
    ldb = b.shape[1]
    per, blocks = _block(n, n * k, MAX_BLOCKS)  # memory-bound: as many blocks as may read at once
    for part in prange(blocks):
        lo = part * per
        hi = min(n, lo + per)
        if tb:  # b holds op(b)ᵀ, (n, k): y[lo:hi] = b[lo:hi] x
            _sgemv(_ROW_MAJOR, _N, hi - lo, k, _F32(1), b[lo:].ctypes, ldb, x.ctypes, 1, _F32(0), y[lo:].ctypes, 1)
        else:  # b is (k, n): y[lo:hi] = b[:, lo:hi]ᵀ x
            _sgemv(_ROW_MAJOR, _T, k, hi - lo, _F32(1), b[:, lo:].ctypes, ldb, x.ctypes, 1, _F32(0),
                   y[lo:].ctypes, 1)
        for j in range(lo, hi if bias.size else lo):
            y[j] += bias[j]


def _as_stored(x):
    """(transposed, array): x C-contiguous as it is, or, where x is the transposed view of such an array, that
    array (read transposed by BLAS, no copy); anything else is copied."""
    if x.flags.c_contiguous:
        return False, x
    if x.flags.f_contiguous:
        return True, x.T
    return False, np.ascontiguousarray(x)


def _split(a, b):
    """Whether `matmul` runs a @ b itself, over the threads: float32 operands and SPLIT_FROM multiply-adds or more
    (else NumPy's product)."""
    return a.dtype == b.dtype == np.float32 and a.shape[0] * a.shape[1] * b.shape[1] >= SPLIT_FROM


def matmul(a, b, bias=None):
    """a @ b (+ bias) for 2-D float32 a (m, k) and b (k, n): the op's product itself, in _block's blocks over the
    threads from SPLIT_FROM multiply-adds (the GEMMs of ops.Linear and ops.MatMul). Any other dtype is NumPy's
    product: ops.MatMul picks this by its float32 B, and a float64 A makes its backward's Aᵀ G a float64 pair,
    which _sgemm would have read as float32."""
    m, n = a.shape[0], b.shape[1]
    if not _split(a, b) or (bias is not None and bias.dtype != a.dtype):
        c = np.matmul(a, b)
        if bias is not None:
            c += bias
        return c
    pool_threads()
    bias = np.empty(0, a.dtype) if bias is None else np.ascontiguousarray(bias)
    tb, b = _as_stored(b)
    c = np.empty((m, n), dtype=a.dtype)
    if m == 1:  # one row (a token's step)
        _vecmat(np.ascontiguousarray(a[0]), b, bias, c[0], tb)
        return c
    ta, a = _as_stored(a)
    _matmul(a, b, bias, c, ta, tb)
    return c


def matmul_pair(a1, b1, a2, b2):
    """(a1 @ b1, a2 @ b2), as two `matmul` calls give them, in one parallel region where both are float32 products
    of SPLIT_FROM multiply-adds or more: Linear backward's dx = G Wᵀ and dW = xᵀ G, one thread each on two cores
    (as a whole OpenBLAS call, from _block's cut with one block at least). Two regions, each product split in two,
    packed each product's shared operand twice and waited twice for the slower thread: on a 2-core Zen 4,
    benchmarks.products' twelve took 4.86 ms that way against 4.72 (medians of four fresh processes each, in
    turns), and the main job's step 2.3 % longer."""
    # one row is matmul's matrix-vector product, 2.5–3.5× faster than a one-row sgemm
    if not (_split(a1, b1) and _split(a2, b2)) or min(a1.shape[0], a2.shape[0]) == 1:
        return matmul(a1, b1), matmul(a2, b2)
    pool_threads()
    c1, c2 = np.empty((a1.shape[0], b1.shape[1]), np.float32), np.empty((a2.shape[0], b2.shape[1]), np.float32)
    (ta1, a1), (tb1, b1), (ta2, a2), (tb2, b2) = (_as_stored(x) for x in (a1, b1, a2, b2))
    _matmul_pair(a1, b1, c1, ta1, tb1, a2, b2, c2, ta2, tb2)
    return c1, c2


# ---- GELU ------------------------------------------------------------------------

_C2, _A = _F32(2 * math.sqrt(2 / math.pi)), _F32(0.044715)
_SATURATED = _F32(40)  # ops.GELU.SATURATED: from |x| = 40 on, σ(2u) is exactly 0 or 1


@_Kernel
def _gelu_forward(x, y):
    """ops.GELU: y = x σ(2u), u = √(2/π)(x + 0.044715x³) (= ½x(1 + tanh u))."""
    for i in prange(x.size):
        v = x[i]
        y[i] = v / (_F32(1) + _exp32(-_C2 * _mul_add(_A * v * v, v, v)))


@_Kernel
def _gelu_backward(x, g, dx):
    """ops.GELU's VJP: dx = g s (1 + x (1 − s) 2u′), s = σ(2u), 2u′ = 2√(2/π)(1 + 3·0.044715x²), x held at
    ±40 as the op's (there s is 0 or 1, and x·2u′ no longer overflows into inf·0 = NaN)."""
    for i in prange(x.size):
        v = min(max(x[i], -_SATURATED), _SATURATED)
        s = _F32(1) / (_F32(1) + _exp32(-_C2 * _mul_add(_A * v * v, v, v)))
        dx[i] = g[i] * s * (_F32(1) + v * (_F32(1) - s) * _C2 * _mul_add(_F32(3) * _A * v, v, _F32(1)))


def gelu_forward(x):
    y = _apart(x, x)
    _gelu_forward(x.reshape(-1), y.reshape(-1))
    return y


def gelu_backward(x, g):
    g = np.ascontiguousarray(g)
    dx = _apart(x, x, g)
    _gelu_backward(x.reshape(-1), g.reshape(-1), dx.reshape(-1))
    return dx


# ---- layer norm --------------------------------------------------------------------


@_Kernel
def _layer_norm_forward(x, w, b, y, mean, rstd, eps):
    """ops.LayerNorm: y = (x − μ) rstd γ + β per row, rstd = 1/√(σ² + ε), σ² = mean((x − μ)²); keeps μ, rstd.
    (x − μ is written to y first, and read back by the sum and the scaling.)"""
    rows, n = x.shape
    width = _F32(n)  # the row's length as a float32: divided by the int n, every row's arithmetic ran in float64
    for r in prange(rows):
        mu = _sum(x[r], n) / width
        for j in range(n):
            y[r, j] = x[r, j] - mu
        rs = _F32(1) / math.sqrt(_dot(y[r], y[r], _F32(0), _F32(1), n) / width + eps)
        for j in range(n):
            y[r, j] = y[r, j] * rs * w[j] + b[j]
        mean[r], rstd[r] = mu, rs


@_Kernel
def _layer_norm_backward(g, x, w, mean, rstd, dx, partial_dw, partial_db):
    """ops.LayerNorm's VJP: dx = (ĝ − mean ĝ − x̂ mean(ĝ x̂)) rstd, ĝ = g γ, x̂ = (x − μ) rstd; and each block of
    rows' partial dγ = Σ g x̂, dβ = Σ g (the blocks fixed, so the sums' order is the same on any thread count)."""
    rows, n = x.shape
    width = _F32(n)  # as in _layer_norm_forward: float32 throughout
    blocks = partial_dw.shape[0]
    per_block = (rows + blocks - 1) // blocks
    for k in prange(blocks):
        dw, db = partial_dw[k], partial_db[k]
        for j in range(n):
            dw[j] = _F32(0)
            db[j] = _F32(0)
        for r in range(k * per_block, min(rows, (k + 1) * per_block)):
            mu, rs, gr, xr, dxr = mean[r], rstd[r], g[r], x[r], dx[r]
            # one loop per array written: LLVM vectorises each (one loop writing all three ran 1.3× slower)
            for j in range(n):
                dxr[j] = gr[j] * w[j]  # ĝ, kept here for the sums and the last pass
            for j in range(n):
                dw[j] += gr[j] * ((xr[j] - mu) * rs)
            for j in range(n):
                db[j] += gr[j]
            sg = _sum(dxr, n) / width
            sgx = _dot(dxr, xr, mu, rs, n) / width
            for j in range(n):
                dxr[j] = (dxr[j] - sg - (xr[j] - mu) * rs * sgx) * rs


def layer_norm_forward(x, w, b, eps):
    """(y, stats) as kernels/cuda.py's layer_norm_forward: stats (2, rows) holds each row's μ and rstd."""
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    y = _apart(rows, rows)
    stats = np.empty((2, len(rows)), dtype=x.dtype)
    _layer_norm_forward(rows, w, b, y, stats[0], stats[1], _F32(eps))
    return y.reshape(x.shape), stats


def layer_norm_backward(g, x, w, stats):
    """(dx, dγ, dβ): dx and each block's partial column sums in one kernel, then the blocks' sums in order."""
    n = x.shape[-1]
    rows, g = x.reshape(-1, n), np.ascontiguousarray(g).reshape(-1, n)
    dx = _apart(rows, rows, g)
    blocks = max(1, min(ROW_BLOCKS, len(rows)))
    partial_dw, partial_db = np.empty((blocks, n), dtype=x.dtype), np.empty((blocks, n), dtype=x.dtype)
    _layer_norm_backward(g, rows, w, stats[0], stats[1], dx, partial_dw, partial_db)
    return dx.reshape(x.shape), partial_dw.sum(axis=0), partial_db.sum(axis=0)


# ---- attention's masked softmax ---------------------------------------------------


CHUNK = 16  # float32 lanes of one AVX-512 vector: _softmax_row's exponentials run over whole chunks of a row


@numba.njit(inline="always", **_jit)
def _softmax_row(s, r, last, scale):
    """Row r of s becomes softmax(scale · s[r, :last + 1]), and 0 after `last` (the keys it may not see). A query
    before every key (more queries than keys under the causal mask: last < 0) sees none, and its row is 0, as in
    the composed op.

    The exponentials run over whole chunks of CHUNK elements (past `last` to its chunk's end, where that chunk
    lies whole in the row), and the last loop writes 0 past `last`: a loop shorter than LLVM's vector body
    (several vectors) ran as scalars, as every row of the main job's attention (64 keys at most) did; its forward
    took 272 µs a layer against 236 now (2 threads, Zen 4). Each element kept is the same arithmetic either way:
    the same bits."""
    n = s.shape[1]
    row = s[r]
    m = _F32(-np.inf)
    for j in range(last + 1):  # scaled once and stored: exp(s − m) is then exactly 1 at the maximum
        row[j] *= scale
        m = max(m, row[j])
    chunked = min((last + CHUNK) // CHUNK * CHUNK, n // CHUNK * CHUNK)
    for c in range(0, chunked, CHUNK):
        chunk = row[c:c + CHUNK]
        for j in range(CHUNK):
            chunk[j] = _exp32(chunk[j] - m)
    for j in range(chunked, last + 1):
        row[j] = _exp32(row[j] - m)
    total = _sum(row, last + 1)
    for j in range(n):
        row[j] = row[j] / total if j <= last else _F32(0)


@numba.njit(inline="always", **_jit)
def _softmax_backward_row(dp, p, r, dot, last, scale):
    """Row r of dP becomes dS = scale · P ⊙ (dP − dot), dot = Gᵣ·Oᵣ = Σⱼ dPᵣⱼ Pᵣⱼ; 0 after `last` (all of it
    for last < 0, as _softmax_row)."""
    for j in range(dp.shape[1]):  # one loop over the whole row, 0 past `last`: vectorised, as _softmax_row's last
        dp[r, j] = scale * p[r, j] * (dp[r, j] - dot) if j <= last else _F32(0)


@_Kernel
def _attention_softmax_forward(s, tq, offset, scale):
    """ops.ScaledDotProductAttention: P = softmax(scale·S) per row in place, query i seeing keys 0 … i + offset
    (Tk − Tq for the causal mask, ≥ Tk for none), 0 above."""
    rows, tk = s.shape
    for r in prange(rows):
        _softmax_row(s, r, min(r % tq + offset, tk - 1), scale)


@_Kernel
def _attention_softmax_backward(dp, p, g, o, tq, offset, scale):
    """ops.ScaledDotProductAttention's VJP through the softmax: dS = scale · P ⊙ (dP − Gᵢ·Oᵢ) in place over dP
    (Gᵢ·Oᵢ = Σⱼ dPᵢⱼ Pᵢⱼ), the 1/√D of dQ = dS K and dK = dSᵀ Q folded in; 0 above the mask."""
    rows, tk = dp.shape
    dv = g.shape[1]
    for r in prange(rows):
        _softmax_backward_row(dp, p, r, _dot(g[r], o[r], _F32(0), _F32(1), dv), min(r % tq + offset, tk - 1), scale)


def attention_softmax_forward(s, offset, scale):
    """s (…, Tq, Tk), C-contiguous, becomes P in place."""
    tq, tk = s.shape[-2:]
    _attention_softmax_forward(s.reshape(-1, tk), tq, offset, _F32(scale))
    return s


def attention_softmax_backward(dp, p, g, o, offset, scale):
    """dp (…, Tq, Tk) becomes dS in place."""
    tq, tk = dp.shape[-2:]
    dv = o.shape[-1]
    _attention_softmax_backward(dp.reshape(-1, tk), p.reshape(-1, tk), np.ascontiguousarray(g).reshape(-1, dv),
                                np.ascontiguousarray(o).reshape(-1, dv), tq, offset, _F32(scale))
    return dp


# ---- attention, every head on its own thread (the shared pool) ----------------------


def _rows(x):
    """x with unit stride along its last axis and rows at least a row apart (what BLAS reads), copied only if it
    has not (a broadcast or flipped view); its row stride in elements."""
    if x.strides[-1] != x.itemsize or (x.shape[-2] > 1 and x.strides[-2] < x.shape[-1] * x.itemsize):
        x = np.ascontiguousarray(x)
    return x, max(x.strides[-2] // x.itemsize, x.shape[-1])  # one row: its stride is anything, BLAS wants ≥ D


@_jitted(parallel=True)
def _attention_forward(q, k, v, ldq, ldk, ldv, p, o, ldo, offset, scale):
    """ops.ScaledDotProductAttention for each head (b, h) on one thread: S = scale · Q Kᵀ by OpenBLAS, P =
    softmax(S) in place over S (query i seeing keys 0 … i + offset), O = P V by OpenBLAS, its rows ldo apart."""
    batch, heads, tq, d = q.shape
    tk, dv = k.shape[2], v.shape[3]
    for bh in prange(batch * heads):
        b, h = bh // heads, bh % heads
        s = p[b, h]
        _sgemm(_ROW_MAJOR, _N, _T, tq, tk, d, scale, q[b, h].ctypes, ldq, k[b, h].ctypes, ldk, _F32(0), s.ctypes, tk)
        for i in range(tq):
            _softmax_row(s, i, min(i + offset, tk - 1), _F32(1))
        _sgemm(_ROW_MAJOR, _N, _N, tq, dv, tk, _F32(1), s.ctypes, tk, v[b, h].ctypes, ldv, _F32(0), o[b, h].ctypes,
               ldo)


@_jitted(parallel=True)
def _attention_backward(q, k, v, g, ldq, ldk, ldv, ldg, p, o, ds, dq, dk, dv, offset, scale):
    """ops.ScaledDotProductAttention's VJP for each head on one thread: dV = Pᵀ G and dP = G Vᵀ by OpenBLAS,
    dS = scale · P ⊙ (dP − Gᵢ·Oᵢ) in place over dP, dQ = dS K and dK = dSᵀ Q by OpenBLAS."""
    batch, heads, tq, d = q.shape
    tk, dvd = k.shape[2], v.shape[3]
    for bh in prange(batch * heads):
        b, h = bh // heads, bh % heads
        s, gh, oh = ds[b, h], g[b, h], o[b, h]
        _sgemm(_ROW_MAJOR, _T, _N, tk, dvd, tq, _F32(1), p[b, h].ctypes, tk, gh.ctypes, ldg, _F32(0),
               dv[b, h].ctypes, dvd)
        _sgemm(_ROW_MAJOR, _N, _T, tq, tk, dvd, _F32(1), gh.ctypes, ldg, v[b, h].ctypes, ldv, _F32(0), s.ctypes, tk)
        for i in range(tq):
            _softmax_backward_row(s, p[b, h], i, _dot(gh[i], oh[i], _F32(0), _F32(1), dvd), min(i + offset, tk - 1),
                                  scale)
        _sgemm(_ROW_MAJOR, _N, _N, tq, d, tk, _F32(1), s.ctypes, tk, k[b, h].ctypes, ldk, _F32(0), dq[b, h].ctypes, d)
        _sgemm(_ROW_MAJOR, _T, _N, tk, d, tq, _F32(1), s.ctypes, tk, q[b, h].ctypes, ldq, _F32(0), dk[b, h].ctypes, d)


def attention_forward(q, k, v, offset, scale):
    """(P, O) for q (B, H, Tq, D), k (B, H, Tk, D), v (B, H, Tk, Dv), read in place where their rows are unit-
    strided (the heads of one fused projection are). O is laid out (B, Tq, H, Dv), each query's heads side by
    side, as a transformer joins them next: its transpose to that order is then a view, not a copy (55 µs a layer
    in the main job's step)."""
    (q, ldq), (k, ldk), (v, ldv) = _rows(q), _rows(k), _rows(v)
    batch, heads, tq, dv = q.shape[:-1] + (v.shape[-1],)
    p = np.empty(q.shape[:-1] + (k.shape[-2],), dtype=q.dtype)
    o = np.empty((batch, tq, heads, dv), dtype=q.dtype).transpose(0, 2, 1, 3)  # (B, H, Tq, Dv)
    pool_threads()
    _attention_forward(q, k, v, ldq, ldk, ldv, p, o, heads * dv, offset, _F32(scale))
    return p, o


def attention_backward(q, k, v, p, o, g, offset, scale):
    """(dQ, dK, dV) from P and O of attention_forward and G = ∂L/∂O. (Laid out (B, T, H, D) as O is, GPT's q/k/v
    picks added them into c_attn's gradient 0.13 ms a step faster, and this kernel, writing rows H·D apart, took
    as much longer: measured twice, on 2026-12-04 and 2026-12-07, and left contiguous.)"""
    (q, ldq), (k, ldk), (v, ldv), (g, ldg) = _rows(q), _rows(k), _rows(v), _rows(g)
    dq, dk, dv = np.empty(q.shape, q.dtype), np.empty(k.shape, q.dtype), np.empty(v.shape, q.dtype)
    pool_threads()
    _attention_backward(q, k, v, g, ldq, ldk, ldv, ldg, p, o, np.empty_like(p), dq, dk, dv, offset, _F32(scale))
    return dq, dk, dv


# ---- embedding ------------------------------------------------------------------------


@_jitted()
def _embedding_backward(ids, g, dw):
    """ops.Embedding's VJP: dW = 0, then dW[ids[r]] += g[r] for every row r in order (a token seen twice gets both)."""
    for i in range(dw.shape[0]):
        for j in range(dw.shape[1]):
            dw[i, j] = _F32(0)
    for r in range(g.shape[0]):
        for j in range(g.shape[1]):
            dw[ids[r], j] += g[r, j]


def embedding_backward(ids, g, rows):
    """dW (rows, C) for the ids (n,) and the gradient rows g (n, C); one thread (the rows' order is the sum's)."""
    dw = np.empty((rows, g.shape[1]), dtype=g.dtype)
    _embedding_backward(np.ascontiguousarray(ids, dtype=np.int64), np.ascontiguousarray(g), dw)
    return dw


# ---- a bias's gradient ---------------------------------------------------------------

COLUMNS = 64  # columns per block of column_sum: each block's columns are one thread's, whatever the thread count


@_Kernel
def _column_sum(rows, out):
    """out = Σ rows over axis 0, each column top to bottom (row 0 + row 1 + …): NumPy's own order for a
    C-contiguous (rows, n) array with n > 1, so the same bits as rows.sum(axis=0); blocks of COLUMNS columns
    shared among the threads."""
    m, n = rows.shape
    for part in prange((n + COLUMNS - 1) // COLUMNS):
        lo = part * COLUMNS
        width = min(n, lo + COLUMNS) - lo
        acc = np.empty(COLUMNS, dtype=rows.dtype)  # the block's sums, apart from rows: the adds vectorise
        for j in range(width):
            acc[j] = rows[0, lo + j]
        for i in range(1, m):
            row = rows[i, lo:lo + width]
            for j in range(width):
                acc[j] += row[j]
        out[lo:lo + width] = acc[:width]


def column_sum(rows):
    """rows.sum(axis=0) of 2-D rows (ops.Linear's db = Σ G), over the threads where rows are C-contiguous."""
    if rows.shape[1] == 1 or not rows.flags.c_contiguous:  # NumPy sums these in other orders (one column:
        return rows.sum(axis=0)                            # pairwise): NumPy's bits are its own sum's
    out = np.empty(rows.shape[1], dtype=rows.dtype)
    _column_sum(rows, out)
    return out


# ---- cross-entropy -------------------------------------------------------------------


@_Kernel
def _cross_entropy_forward(z, dz, targets, loss, vocab, ignore):
    """ops.CrossEntropy, forward and backward together: per row, loss = lse − z[t] over the first `vocab`
    columns and dz = softmax(z) − onehot(t) (dz may be z itself); 0 in padded columns and ignored rows."""
    rows, stride = z.shape
    for r in prange(rows):
        t = targets[r]
        m = z[r, 0]
        for j in range(1, vocab):
            m = max(m, z[r, j])
        valid = t != ignore
        target = z[r, t] if valid else _F32(0)  # read before dz, which may be z itself, overwrites it
        for j in range(vocab):  # each exp once: kept in dz, summed and normalised below
            dz[r, j] = _exp32(z[r, j] - m)
        total = _sum(dz[r], vocab)
        loss[r] = math.log(total) - (target - m) if valid else _F32(0)  # not m + log Σ: a large m absorbs it
        for j in range(vocab):
            dz[r, j] = dz[r, j] / total - (_F32(1) if j == t else _F32(0)) if valid else _F32(0)
        for j in range(vocab, stride):
            dz[r, j] = _F32(0)


def cross_entropy_forward(z, targets, vocab, ignore, out):
    """Per-row losses; softmax − onehot over z's first `vocab` columns written to `out` (z itself for in place)."""
    loss = np.empty(len(z), dtype=z.dtype)
    targets = np.ascontiguousarray(targets, dtype=np.int64)
    _cross_entropy_forward(z, out, targets, loss, vocab, -1 if ignore is None else ignore)
    return loss


# ---- AdamW and clip_grad_norm_, over a list of arrays ----------------------------------
# One kernel call steps every parameter of a group (or sums every gradient's squares), however many arrays hold
# them: each array is cut into NORM_BLOCK-element blocks (the last one shorter), the blocks are shared among the
# threads, and each block reads its arrays through their addresses. The blocks follow the arrays' sizes alone,
# never the thread count, so the bits do not depend on it; a list of one array is the flat buffer's case.

NORM_BLOCK = 1024  # elements per block, and per partial sum of squares


@intrinsic
def _float32_at(typingctx, address):
    """The float32 pointer to `address` (an int64 that _address gave), for numba.carray."""
    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(signature.return_type))
    return nbtypes.CPointer(nbtypes.float32)(nbtypes.int64), codegen


@functools.lru_cache(maxsize=64)
def _blocks(sizes):
    """(blocks, 3) int64 for arrays of `sizes` elements: each block's array, first element and element past its
    last, the blocks of each array in turn."""
    rows = [(i, lo, min(lo + NORM_BLOCK, n)) for i, n in enumerate(sizes) for lo in range(0, n, NORM_BLOCK)]
    return np.array(rows, np.int64).reshape(-1, 3)


@numba.njit(inline="always", **_jit)
def _block_array(table, blocks, b, column):
    """The part of the array in table[column] that block b covers, as a C-contiguous array."""
    lo = blocks[b, 1]
    return numba.carray(_float32_at(table[column, blocks[b, 0]] + 4 * lo), blocks[b, 2] - lo)


@_Kernel
def _adamw(blocks, table, decay, beta2, one_minus_beta1, one_minus_beta2, eps, step_size):
    """nn.optim.AdamW's update (its docstring has the formula) of the arrays whose addresses `table`'s rows hold
    (g, w, m, v), w, m, v in place:
    m ← m + (1−β₁)(g − m);  v ← β₂v + (1−β₂)g²;  w ← w·decay + step_size · m / (√v + eps)."""
    for b in prange(blocks.shape[0]):
        g, w, m, v = (_block_array(table, blocks, b, 0), _block_array(table, blocks, b, 1),
                      _block_array(table, blocks, b, 2), _block_array(table, blocks, b, 3))
        for i in range(g.size):
            gi = g[i]
            mi = m[i] + one_minus_beta1 * (gi - m[i])
            vi = beta2 * v[i] + one_minus_beta2 * gi * gi
            m[i], v[i] = mi, vi
            w[i] = w[i] * decay + step_size * mi / (math.sqrt(vi) + eps)


def adamw_many(grads, decay, beta1, beta2, eps, step_size, params, exp_avgs, exp_avg_sqs):
    """The update of every parameter in `params` (their .data), with its gradient and moments at the same place
    in the other lists, in one call; each array C-contiguous float32, the moments and weights each its own memory.

    1 − β is taken in float64 and then rounded, as torch.optim.AdamW and the composed update do: 1 minus a
    float32 β₂ = 0.999 loses 1.3e-5 of its value, which scaled every step by 6e-6."""
    blocks = _blocks(tuple(w.size for w in params))
    _adamw.over(blocks.shape[0] * NORM_BLOCK)(
        blocks, _addresses(grads, params, exp_avgs, exp_avg_sqs), _F32(decay), _F32(beta2), _F32(1 - beta1),
        _F32(1 - beta2), _F32(eps), _F32(step_size))


def adamw(g, decay, beta1, beta2, eps, step_size, w, m, v):
    """The update as kernels/cuda.py's ADAMW takes it, w, m, v in place: adamw_many's for one parameter. A strided
    one (a parameter made from a transpose) steps a contiguous copy, written back."""
    state = [a if a.flags.c_contiguous else np.ascontiguousarray(a) for a in (w, m, v)]
    adamw_many([np.ascontiguousarray(g)], decay, beta1, beta2, eps, step_size, *([a] for a in state))
    for a, stepped in zip((w, m, v), state):
        if stepped is not a:
            a[...] = stepped


@_Kernel
def _sum_of_squares(blocks, table, partial):
    """partial[b] = Σ x² over block b, in _sum's order."""
    for b in prange(blocks.shape[0]):
        block = _block_array(table, blocks, b, 0)
        partial[b] = _dot(block, block, _F32(0), _F32(1), block.size)


@_Kernel
def _scale(blocks, table, factor):
    """Each array in table[0] times `factor`, in place."""
    for b in prange(blocks.shape[0]):
        block = _block_array(table, blocks, b, 0)
        for i in range(block.size):
            block[i] *= factor


def _norm(grads):
    """(norm, blocks, addresses) of `grads`, each C-contiguous float32: the blocks' float32 sums of squares added
    in float64 (NumPy's pairwise sum, whose order follows their count)."""
    blocks, table = _blocks(tuple(g.size for g in grads)), _addresses(grads)
    partial = np.empty(blocks.shape[0], dtype=np.float32)
    _sum_of_squares.over(blocks.shape[0] * NORM_BLOCK)(blocks, table, partial)
    return math.sqrt(partial.sum(dtype=np.float64)), blocks, table


def _factor(norm, max_norm):
    """min(1, max_norm / (norm + 1e-6)) in float32, NaN where the norm is."""
    factor = max_norm / (norm + 1e-6)
    return _F32(1.0 if factor >= 1 else factor)


def clip_many(grads, max_norm):
    """clip_grad_norm_ for gradients each C-contiguous float32, in one call: their norm (a float), and each of
    them scaled in place by _factor where that is not 1."""
    norm, blocks, table = _norm(grads)
    factor = _factor(norm, max_norm)
    if not factor >= 1:
        _scale.over(blocks.shape[0] * NORM_BLOCK)(blocks, table, factor)
    return norm


def grad_norm(flat, max_norm):
    """(norm, scale) as kernels/cuda.py's grad_norm gives them, one-element arrays, for one flat C-contiguous
    gradient buffer (AdamW's flat_grads): _norm's, and _factor's."""
    norm = _norm([flat])[0]
    return np.array([norm]), np.array([_factor(norm, max_norm)])


# What kernels.fused(name, array) hands an op on the CPU, with the fewest elements at which it is used: below
# about 16K, numba's dispatch (about 10 µs a call) costs as much as the passes it saves, and the lessons'
# small models keep the composed ops whose numbers their texts print.
SMALLEST = 16384
LAUNCHERS = {
    "gelu_forward": (gelu_forward, SMALLEST),
    "gelu_backward": (gelu_backward, SMALLEST),
    "layer_norm_forward": (layer_norm_forward, SMALLEST),
    "layer_norm_backward": (layer_norm_backward, SMALLEST),
    "attention_softmax_forward": (attention_softmax_forward, SMALLEST),
    "attention_softmax_backward": (attention_softmax_backward, SMALLEST),
    "cross_entropy_forward": (cross_entropy_forward, SMALLEST),
    "embedding_backward": (embedding_backward, SMALLEST),
    "column_sum": (column_sum, SMALLEST),
    "adamw": (adamw, 1024),  # a dozen passes over four arrays in NumPy: it pays from 1K elements
    "grad_norm": (grad_norm, 1024),
    # asked for by the largest array of the list: the lessons' small models keep the composed update
    "adamw_many": (adamw_many, 1024),
    "clip_many": (clip_many, 1024),
}
if SHARED_POOL:  # kernels that call OpenBLAS from numba's threads
    # the products are asked for by the weight's size (a token's x is one small row), and decide by their multiply-
    # adds themselves (SPLIT_FROM): the main job's tied LM head, wteᵀ of 65 × 128 (8,320 elements, under SMALLEST),
    # ran on one thread
    LAUNCHERS.update({"matmul": (matmul, 1024), "matmul_pair": (matmul_pair, 1024),
                      "attention_forward": (attention_forward, SMALLEST),
                      "attention_backward": (attention_backward, SMALLEST)})
# The pool is set before any kernel runs, however this module is reached (kernels.fused, a test, a benchmark): left
# with its own threads, OpenBLAS ran each block of a split product over them inside numba's threads, oversubscribing
# the cores (7 ms a product instead of 1) and, on an AVX2 machine, rounding the block otherwise than on one thread.
runtime.set_threads(runtime.threads())
