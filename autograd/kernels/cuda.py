"""CUDA sources of fused kernels, for CuPy: one pass over memory where composed array code makes many.

Each kernel computes exactly the formula of its op (ops.py states the
Jacobian, nn/optim.py the update), and says in its first line which op and
which formula. It exists only because on a GPU one pass beats the several
passes (and temporaries) of the composed expression. kernels.fused()
compiles them on first use, on a GPU only; the CPU never sees them.
AUTOGRAD_FUSED=0 switches every one off, so a benchmark can time the
composed version against them. tests/autograd/test_cuda_kernels.py compiles
every source with NVRTC for sm_80 and sm_90, and cuda_twins.py beside this file
repeats each raw kernel's order of work in NumPy, checked in float64.

ELEMENTWISE: name → (input parameters, output parameters, body) for CuPy's
ElementwiseKernel, T the float type.

RAW: name → CUDA source of one `template <typename T> __global__` function
of that name, compiled for float and double (CuPy's RawModule name
expressions). LAUNCHERS: the name kernels.fused() is asked for → its launcher,
(kernels…, arrays…) → result, and the raw kernels it takes, in order.
Warp-per-row kernels take a row of any length; every loop is lane-strided
(element j belongs to lane j mod 32), so a row's loads are coalesced.
"""
import numpy

from .. import backend

# GELU, tanh approximation: y = ½x(1 + tanh u), u = √(2/π)(x + 0.044715x³)
GELU_FORWARD = ("T x", "T y", """
    const T c = 0.7978845608028654, a = 0.044715;
    const T t = tanh(c * (x + a * x * x * x));
    y = T(0.5) * x * (T(1) + t);
""")

# dx = g · [½(1 + t) + ½x(1 − t²) · √(2/π)(1 + 3·0.044715x²)], x held at ±40 as ops.GELU's: there t is ±1, and
# x·(1 + 3·0.044715x²) no longer overflows into inf·0 = NaN
GELU_BACKWARD = ("T x, T g", "T dx", """
    const T c = 0.7978845608028654, a = 0.044715;
    const T v = x < T(-40) ? T(-40) : (x > T(40) ? T(40) : x);
    const T t = tanh(c * (v + a * v * v * v));
    dx = g * (T(0.5) * (T(1) + t) + T(0.5) * v * (T(1) - t * t) * c * (T(1) + T(3) * a * v * v));
""")

# nn.optim.AdamW's update in one pass instead of a dozen (its docstring has the formula; w, m, v in place):
# m ← m + (1−β₁)(g − m);  v ← β₂v + (1−β₂)g²;  w ← w·decay + step_size · m / (√v + eps).
# The betas come in float64: 1 minus a float32 β₂ = 0.999 loses 1.3e-5 of its value (torch rounds 1 − β, not β)
ADAMW = ("T g, T decay, float64 beta1, float64 beta2, T eps, T step_size", "T w, T m, T v", """
    m += T(1.0 - beta1) * (g - m);
    v = T(beta2) * v + T(1.0 - beta2) * g * g;
    w = w * decay + step_size * m / (sqrt(v) + eps);
""")

ELEMENTWISE = {"gelu_forward": GELU_FORWARD, "gelu_backward": GELU_BACKWARD, "adamw": ADAMW}

# Shared by the raw kernels: sums and (max, sum of exp) pairs combined across a warp by butterfly shuffles.
PRELUDE = r"""
#define FULL_MASK 0xffffffffu
// The online max starts at T's lowest finite value, below every finite score of T (a double score may be −1e300,
// where a start above a whole row would keep s = 0); exp(lowest − x) = 0
template <typename T> __device__ T lowest();
template <> __device__ float lowest<float>() { return -3.4028234663852886e38f; }
template <> __device__ double lowest<double>() { return -1.7976931348623157e308; }

template <typename T> __device__ T warp_sum(T v) {
    for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

// Online softmax statistics: (m, s) with s = Σ exp(x − m); merging rescales each side to the larger m.
template <typename T> __device__ void merge(T& m, T& s, T m2, T s2) {
    const T top = fmax(m, m2);
    s = s * exp(m - top) + s2 * exp(m2 - top);
    m = top;
}

template <typename T> __device__ void warp_merge(T& m, T& s) {
    for (int o = 16; o > 0; o /= 2) {
        const T m2 = __shfl_xor_sync(FULL_MASK, m, o), s2 = __shfl_xor_sync(FULL_MASK, s, o);
        merge(m, s, m2, s2);
    }
}
"""

# ScaledDotProductAttention forward: P = softmax(scale·S, causal) in place over S, one warp per row of
# B·H·Tq rows of Tk; query i sees keys 0 … i + offset (offset = Tk − Tq; ≥ Tk for no mask). One online
# pass over the visible prefix for (m, s), then one pass writing exp(scale·Sⱼ − m)/s there and 0 above it.
ATTENTION_SOFTMAX_FORWARD = r"""
template <typename T>
__global__ void attention_softmax_forward(T* s, int rows, int tq, int tk, int offset, T scale) {
    const int lane = threadIdx.x % 32;
    const long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;  // the whole warp: r is the warp's
    T* row = s + r * tk;
    const int last = min((int)(r % tq) + offset, tk - 1);
    T m = lowest<T>(), sum = T(0);
    for (int j = lane; j <= last; j += 32) {
        const T x = row[j] * scale;
        if (x > m) { sum = sum * exp(m - x) + T(1); m = x; }
        else sum += exp(x - m);
    }
    warp_merge(m, sum);
    const T inv = T(1) / sum;
    for (int j = lane; j < tk; j += 32)
        row[j] = j <= last ? exp(row[j] * scale - m) * inv : T(0);
}
"""

# ScaledDotProductAttention backward: dS = scale · P ⊙ (dP − rowsum) in place over dP, rowsum = Gᵢ · Oᵢ
# (= Σⱼ dPᵢⱼ Pᵢⱼ), one warp per row; the scale 1/√D of dQ = dS K, dK = dSᵀ Q folded in; 0 above the mask.
ATTENTION_SOFTMAX_BACKWARD = r"""
template <typename T>
__global__ void attention_softmax_backward(T* dp, const T* p, const T* g, const T* o, int rows, int tq, int tk,
                                           int dv, int offset, T scale) {
    const int lane = threadIdx.x % 32;
    const long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const int last = min((int)(r % tq) + offset, tk - 1);
    T dot = T(0);
    for (int d = lane; d < dv; d += 32) dot += g[r * dv + d] * o[r * dv + d];
    dot = warp_sum(dot);
    T* row = dp + r * tk;
    const T* prow = p + r * tk;
    for (int j = lane; j < tk; j += 32)
        row[j] = j <= last ? scale * prow[j] * (row[j] - dot) : T(0);
}
"""

# LayerNorm forward: y = (x − μ)·rstd·γ + β, rstd = 1/√(σ² + ε), one warp per row of n; saves μ and rstd.
# Two passes for μ then σ² = mean((x − μ)²) (as the composed op), a third writes y.
LAYER_NORM_FORWARD = r"""
template <typename T>
__global__ void layer_norm_forward(const T* x, const T* w, const T* b, T* y, T* mean, T* rstd, int rows, int n,
                                   T eps) {
    const int lane = threadIdx.x % 32;
    const long long r = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    if (r >= rows) return;
    const T* xr = x + r * n;
    T sum = T(0);
    for (int j = lane; j < n; j += 32) sum += xr[j];
    const T mu = warp_sum(sum) / T(n);
    T sq = T(0);
    for (int j = lane; j < n; j += 32) { const T d = xr[j] - mu; sq += d * d; }
    const T rs = T(1) / sqrt(warp_sum(sq) / T(n) + eps);
    T* yr = y + r * n;
    for (int j = lane; j < n; j += 32) yr[j] = (xr[j] - mu) * rs * w[j] + b[j];
    if (lane == 0) { mean[r] = mu; rstd[r] = rs; }
}
"""

# LayerNorm backward: dx = (ĝ − mean ĝ − x̂·mean(ĝx̂))·rstd with ĝ = g⊙γ, x̂ = (x − μ)·rstd, one warp per row;
# and each block's partial dγ = Σ g⊙x̂, dβ = Σ g over its own rows_per_block rows, one thread per column
# (the rows it just read, from cache), written to row blockIdx of the partials: no atomics, deterministic.
LAYER_NORM_BACKWARD = r"""
template <typename T>
__global__ void layer_norm_backward(const T* g, const T* x, const T* w, const T* mean, const T* rstd, T* dx,
                                    T* partial_dw, T* partial_db, int rows, int n, int rows_per_block) {
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32;
    const long long start = (long long)blockIdx.x * rows_per_block;
    const long long end = min(start + rows_per_block, (long long)rows);
    for (long long r = start + threadIdx.x / 32; r < end; r += warps) {
        const T* gr = g + r * n;
        const T* xr = x + r * n;
        const T mu = mean[r], rs = rstd[r];
        T sg = T(0), sgx = T(0);
        for (int j = lane; j < n; j += 32) {
            const T gh = gr[j] * w[j];
            sg += gh;
            sgx += gh * (xr[j] - mu) * rs;
        }
        sg = warp_sum(sg) / T(n);
        sgx = warp_sum(sgx) / T(n);
        T* dxr = dx + r * n;
        for (int j = lane; j < n; j += 32)
            dxr[j] = (gr[j] * w[j] - sg - (xr[j] - mu) * rs * sgx) * rs;
    }
    for (int c = threadIdx.x; c < n; c += blockDim.x) {
        T dw = T(0), db = T(0);
        for (long long r = start; r < end; r++) {
            const T gv = g[r * n + c];
            dw += gv * (x[r * n + c] - mean[r]) * rstd[r];
            db += gv;
        }
        partial_dw[blockIdx.x * (long long)n + c] = dw;
        partial_db[blockIdx.x * (long long)n + c] = db;
    }
}
"""

# LayerNorm backward, second launch: dγ = Σ over blocks of the partial dγ, dβ likewise, one thread per column.
LAYER_NORM_COLUMNS = r"""
template <typename T>
__global__ void layer_norm_columns(const T* partial_dw, const T* partial_db, T* dw, T* db, int blocks, int n) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n) return;
    T sw = T(0), sb = T(0);
    for (int k = 0; k < blocks; k++) { sw += partial_dw[k * (long long)n + c]; sb += partial_db[k * (long long)n + c]; }
    dw[c] = sw;
    db[c] = sb;
}
"""

# CrossEntropy forward and backward together (the fused classifier): per row, loss = lse − z[t] over the
# first `vocab` of `stride` columns and dz = softmax(z) − onehot(t) written to `dz` (which may be z itself,
# in place), 0 in padded columns and in rows whose target is `ignore`. One block per row: each thread an
# online (m, s) over columns tid, tid + blockDim, …; warps merge, then warp 0 merges the warps.
CROSS_ENTROPY_FORWARD = r"""
template <typename T>
__global__ void cross_entropy_forward(const T* z, T* dz, const long long* targets, T* loss, int vocab, int stride,
                                      long long ignore) {
    __shared__ T shared_m[32], shared_s[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const T* row = z + (long long)blockIdx.x * stride;
    T* out = dz + (long long)blockIdx.x * stride;
    const long long t = targets[blockIdx.x];
    T m = lowest<T>(), s = T(0);
    for (int j = threadIdx.x; j < vocab; j += blockDim.x) {
        const T x = row[j];
        if (x > m) { s = s * exp(m - x) + T(1); m = x; }
        else s += exp(x - m);
    }
    warp_merge(m, s);
    if (lane == 0) { shared_m[warp] = m; shared_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < warps ? shared_m[lane] : lowest<T>();
        s = lane < warps ? shared_s[lane] : T(0);
        warp_merge(m, s);
        if (lane == 0) {
            shared_m[0] = m;
            shared_s[0] = s;
            // read before the row is overwritten; log s apart from m, which absorbs it when large (1e30)
            loss[blockIdx.x] = t == ignore ? T(0) : log(s) - (row[t] - m);
        }
    }
    __syncthreads();
    m = shared_m[0];
    const T inv = T(1) / shared_s[0];
    const bool valid = t != ignore;
    for (int j = threadIdx.x; j < stride; j += blockDim.x)
        out[j] = valid && j < vocab ? exp(row[j] - m) * inv - (j == t ? T(1) : T(0)) : T(0);
}
"""

# clip_grad_norm_, first launch: partial sums of x² over one flat gradient buffer, in double, one per block
# (a grid-stride loop, then the block's warps summed through shared memory).
SUM_OF_SQUARES = r"""
template <typename T>
__global__ void sum_of_squares(const T* x, double* partial, long long n) {
    __shared__ double shared[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    double acc = 0.0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        acc += (double)x[i] * (double)x[i];
    acc = warp_sum(acc);
    if (lane == 0) shared[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = warp_sum(lane < warps ? shared[lane] : 0.0);
        if (lane == 0) partial[blockIdx.x] = acc;
    }
}
"""

# clip_grad_norm_, second launch (one block): norm = √Σ partials, scale = min(1, max_norm / (norm + 1e-6)),
# both left on the device, where the buffer is scaled by it: no copy to the host.
CLIP_SCALE = r"""
template <typename T>
__global__ void clip_scale(const double* partial, int blocks, double max_norm, T* norm, T* scale) {
    __shared__ double shared[32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
    double acc = 0.0;
    for (int k = threadIdx.x; k < blocks; k += blockDim.x) acc += partial[k];
    acc = warp_sum(acc);
    if (lane == 0) shared[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        acc = warp_sum(lane < warps ? shared[lane] : 0.0);
        if (lane == 0) {
            const double total = sqrt(acc), factor = max_norm / (total + 1e-6);
            norm[0] = T(total);
            scale[0] = T(factor >= 1.0 ? 1.0 : factor);  // a NaN norm gives a NaN scale, as on the host
        }
    }
}
"""

RAW = {
    "attention_softmax_forward": ATTENTION_SOFTMAX_FORWARD,
    "attention_softmax_backward": ATTENTION_SOFTMAX_BACKWARD,
    "layer_norm_forward": LAYER_NORM_FORWARD,
    "layer_norm_backward": LAYER_NORM_BACKWARD,
    "layer_norm_columns": LAYER_NORM_COLUMNS,
    "cross_entropy_forward": CROSS_ENTROPY_FORWARD,
    "sum_of_squares": SUM_OF_SQUARES,
    "clip_scale": CLIP_SCALE,
}

ROW_WARPS = 8  # warp-per-row kernels: 8 rows per block of 256 threads
LN_ROWS_PER_BLOCK = 32  # layer norm backward: rows whose dγ/dβ one block sums (8,192 rows → 256 blocks)
CE_THREADS = 512  # cross-entropy: threads per row of 50,257 logits
NORM_BLOCKS = 1024  # sum_of_squares: partial sums, added up by clip_scale's one block


def source(name):
    """The whole CUDA source of raw kernel `name`, as compiled: the shared helpers, then the kernel."""
    return PRELUDE + RAW[name]


def name_expression(name, dtype):
    """The instantiation `name<float>` or `name<double>` for arrays of `dtype`."""
    kind = {numpy.dtype(numpy.float32): "float", numpy.dtype(numpy.float64): "double"}.get(numpy.dtype(dtype))
    if kind is None:
        raise TypeError(f"{name}: the CUDA kernel takes float32 or float64 arrays, got {numpy.dtype(dtype)}")
    return f"{name}<{kind}>"


def _rows_grid(rows):
    return ((rows + ROW_WARPS - 1) // ROW_WARPS,), (32 * ROW_WARPS,)


def _int(n):
    if n >= 2 ** 31:
        raise ValueError(f"CUDA kernel: a size of {n} does not fit the kernels' 32-bit row and column counts")
    return numpy.int32(n)


def attention_softmax_forward(kernel, s, offset, scale):
    """s (…, Tq, Tk), C-contiguous, becomes P in place."""
    tq, tk = s.shape[-2:]
    kernel(*_rows_grid(s.size // tk), (s, _int(s.size // tk), _int(tq), _int(tk), _int(offset), s.dtype.type(scale)))
    return s


def attention_softmax_backward(kernel, dp, p, g, o, offset, scale):
    """dp (…, Tq, Tk) becomes dS in place; g and o (…, Tq, Dv) must be C-contiguous."""
    tq, tk = dp.shape[-2:]
    rows = dp.size // tk
    kernel(*_rows_grid(rows), (dp, p, g, o, _int(rows), _int(tq), _int(tk), _int(o.shape[-1]), _int(offset),
                               dp.dtype.type(scale)))
    return dp


def layer_norm_forward(kernel, x, w, b, eps):
    """(y, stats) for x (…, n), γ and β (n,), C-contiguous and of one dtype: stats (2, rows) holds each row's μ
    and rstd."""
    xp = _array_module(x)
    n = x.shape[-1]
    rows = x.size // n
    y = xp.empty_like(x)
    stats = xp.empty((2, rows), dtype=x.dtype)
    kernel(*_rows_grid(rows), (x, w, b, y, stats[0], stats[1], _int(rows), _int(n), x.dtype.type(eps)))
    return y, stats


def layer_norm_backward(kernel, columns, g, x, w, stats):
    """(dx, dγ, dβ) in two launches: dx and per-block partial column sums, then their sums. g and x (…, n), γ (n,)
    C-contiguous and of one dtype, as layer_norm_forward's."""
    xp = _array_module(x)
    n = x.shape[-1]
    rows = x.size // n
    blocks = (rows + LN_ROWS_PER_BLOCK - 1) // LN_ROWS_PER_BLOCK
    dx = xp.empty_like(x)
    partial_dw, partial_db = xp.empty((blocks, n), dtype=x.dtype), xp.empty((blocks, n), dtype=x.dtype)
    kernel((blocks,), (32 * ROW_WARPS,), (g, x, w, stats[0], stats[1], dx, partial_dw, partial_db, _int(rows), _int(n),
                                          _int(LN_ROWS_PER_BLOCK)))
    dw, db = xp.empty(n, dtype=x.dtype), xp.empty(n, dtype=x.dtype)
    columns(((n + 255) // 256,), (256,), (partial_dw, partial_db, dw, db, _int(blocks), _int(n)))
    return dx, dw, db


def cross_entropy_forward(kernel, z, targets, vocab, ignore, out):
    """Per-row losses, and softmax − onehot over z's first `vocab` columns written to `out` (z itself for in place)."""
    xp = _array_module(z)
    rows, stride = z.shape
    loss = xp.empty(rows, dtype=z.dtype)
    targets = xp.ascontiguousarray(targets, dtype=xp.int64)
    kernel((rows,), (CE_THREADS,), (z, out, targets, loss, _int(vocab), _int(stride),
                                    numpy.int64(-1 if ignore is None else ignore)))
    return loss


def grad_norm(kernel, scale_kernel, flat, max_norm):
    """(norm, scale) as one-element device arrays, for one flat C-contiguous gradient buffer."""
    xp = _array_module(flat)
    partial = xp.empty(NORM_BLOCKS, dtype=xp.float64)
    kernel((NORM_BLOCKS,), (256,), (flat, partial, numpy.int64(flat.size)))
    norm, scale = xp.empty(1, dtype=flat.dtype), xp.empty(1, dtype=flat.dtype)
    scale_kernel((1,), (256,), (partial, _int(NORM_BLOCKS), numpy.float64(max_norm), norm, scale))
    return norm, scale


def _array_module(array):
    return backend.xp_for(backend.device_of(array))


# What kernels.fused(name, array) hands an op: name → (launcher, the raw kernels it takes, in order).
LAUNCHERS = {
    "attention_softmax_forward": (attention_softmax_forward, ("attention_softmax_forward",)),
    "attention_softmax_backward": (attention_softmax_backward, ("attention_softmax_backward",)),
    "layer_norm_forward": (layer_norm_forward, ("layer_norm_forward",)),
    "layer_norm_backward": (layer_norm_backward, ("layer_norm_backward", "layer_norm_columns")),
    "cross_entropy_forward": (cross_entropy_forward, ("cross_entropy_forward",)),
    "grad_norm": (grad_norm, ("sum_of_squares", "clip_scale")),
}
