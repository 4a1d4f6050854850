"""The kernels of GPT-2's one-token decode step (models/gpt/decode.py): CUDA sources, and their NumPy twins.

What this file promises:

* `SOURCE`: one CUDA module (RawKernels only: cuBLAS and cuRAND cannot run
  inside a CUDA-graph capture) with the step's kernels for one query token:
  `embed`, `layer_norm`, `matvec` (bias, and GELU or the residual add in its
  epilogue), `attention` (writes the new key and value into the static cache,
  then attends over positions 0 … pos, reading pos from device memory),
  `lm_head`, `sample` (greedy, or temperature/top-k/top-p with a Philox4x32-10
  draw inside the kernel) and `advance` (pos += 1). Every shape and address
  is a launch argument fixed for the life of a decoder, so a step can be
  captured once and replayed. `source(dtype)` is it for float32 or float64.
* `NumpyKernels`: each kernel as a NumPy function with the same arguments and
  the same order of work (the same slices, chunks, bisections and tie rules),
  so the CPU tests check the algorithm the GPU runs. `CudaKernels`: the same
  methods, launching the CUDA module on CuPy's current stream.
* `philox4x32` and `uniform`: the counter-based generator in NumPy, bit for bit
  the kernel's (Random123's known-answer vectors are in the tests).

Layouts: activations (B, width) row-major; Linear weights (in, out) as GPT-2
stores them; the token embedding (V, C) is also the LM head; the cache of a
layer (B, nh, block_size, hs). Token ids and pos are int32 on the device.
"""
import math

import numpy as np

from autograd import backend
from models.gpt.sampling import NO_TOKEN

# Launch shapes, shared by the CUDA source (as #defines) and the twins, which follow them.
COLS, SLICES, ROWS = 8, 32, 4  # matvec: a block sums 8 output columns over 32 slices of the inputs, for 4 rows
ATTENTION_THREADS = 256
ATTENTION_SCRATCH = 32  # reals of the attention kernel's static shared memory (scratch), beside T + threads dynamic
LM_HEAD_WARPS = 8  # vocabulary rows per block of the LM head, one warp each
SAMPLE_THREADS = 1024  # one block per row; thread t owns the t-th contiguous chunk of the vocabulary
THREADS = {"embed": 256, "layer_norm": 256, "matvec": COLS * SLICES, "attention": ATTENTION_THREADS,
           "lm_head": 32 * LM_HEAD_WARPS, "sample": SAMPLE_THREADS, "advance": 1}  # per block, as CudaKernels launches
PLAIN, GELU, RESIDUAL = 0, 1, 2  # matvec epilogues: y = xW + b;  y = gelu(xW + b);  y += xW + b
PARAMS = 5  # sample's device parameters: temperature, top_k (0 = off), top_p, Philox key (two 32-bit words)

SOURCE = r"""
#define COLS %(COLS)d
#define SLICES %(SLICES)d
#define ROWS %(ROWS)d
#define LM_HEAD_WARPS %(LM_HEAD_WARPS)d
#define FULL 0xffffffffu
#define NEG_INF __int_as_float(0xff800000)  // NVRTC has no math.h INFINITY
#define INF __int_as_float(0x7f800000)

template <typename V> __device__ V warp_sum(V v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL, v, o);
    return v;
}

template <typename V> __device__ V warp_max(V v) {
    for (int o = 16; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

template <typename V> __device__ V warp_min(V v) {
    for (int o = 16; o > 0; o >>= 1) v = min(v, __shfl_xor_sync(FULL, v, o));
    return v;
}

// The sum over the block, returned to every thread; blockDim.x a multiple of 32; scratch holds 32 values.
template <typename V> __device__ V block_sum(V v, V* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // scratch may still be read from the previous call
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_sum(lane < warps ? scratch[lane] : V(0));
}

template <typename V> __device__ V block_max(V v, V* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_max(lane < warps ? scratch[lane] : scratch[0]);
}

template <typename V> __device__ V block_min(V v, V* scratch) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    v = warp_min(v);
    __syncthreads();
    if (lane == 0) scratch[warp] = v;
    __syncthreads();
    return warp_min(lane < warps ? scratch[lane] : scratch[0]);
}

// Exclusive prefix sum over the threads in order; *total gets the whole sum. scratch holds 33 values.
template <typename V> __device__ V block_exclusive_scan(V v, V* scratch, V* total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    V inclusive = v;
    for (int o = 1; o < 32; o <<= 1) {
        const V before = __shfl_up_sync(FULL, inclusive, o);
        if (lane >= o) inclusive += before;
    }
    __syncthreads();
    if (lane == 31) scratch[warp] = inclusive;
    __syncthreads();
    if (warp == 0) {
        const V mine = lane < warps ? scratch[lane] : V(0);
        V upto = mine;
        for (int o = 1; o < 32; o <<= 1) {
            const V before = __shfl_up_sync(FULL, upto, o);
            if (lane >= o) upto += before;
        }
        if (lane < warps) scratch[lane] = upto - mine;
        if (lane == 31) scratch[32] = upto;
    }
    __syncthreads();
    *total = scratch[32];
    return scratch[warp] + inclusive - v;
}

// An unsigned key with the order of the floats (negative ones flipped whole, positive ones get the sign bit).
__device__ unsigned int order_key(float f) {
    const unsigned int u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ unsigned long long order_key(double f) {
    const unsigned long long u = (unsigned long long)__double_as_longlong(f);
    return (u & 0x8000000000000000ull) ? ~u : (u | 0x8000000000000000ull);
}

typedef decltype(order_key(real(0))) order_t;

// Philox4x32-10 (Salmon et al., SC 2011): ten rounds of two 32x32 -> 64-bit products and a Weyl key schedule.
__device__ uint4 philox4x32(uint4 c, uint2 k) {
    for (int round = 0; round < 10; round++) {
        const unsigned int hi0 = __umulhi(0xD2511F53u, c.x), lo0 = 0xD2511F53u * c.x;
        const unsigned int hi1 = __umulhi(0xCD9E8D57u, c.z), lo1 = 0xCD9E8D57u * c.z;
        c = make_uint4(hi1 ^ c.y ^ k.x, lo1, hi0 ^ c.w ^ k.y, lo0);
        k.x += 0x9E3779B9u;
        k.y += 0xBB67AE85u;
    }
    return c;
}

__device__ real gelu(real x) {
    const real c = 0.7978845608028654, a = 0.044715;
    return real(0.5) * x * (real(1) + tanh(c * (x + a * x * x * x)));
}

extern "C" {

// x[b] = wte[token[b]] + wpe[pos]: one block per row.
__global__ void embed(const int* token, const int* pos, const real* wte, const real* wpe, real* x, int C) {
    const real* e = wte + (long long)token[blockIdx.x] * C;
    const real* p = wpe + (long long)pos[0] * C;
    for (int i = threadIdx.x; i < C; i += blockDim.x) x[blockIdx.x * C + i] = e[i] + p[i];
}

// y[b] = (x[b] - mean) / sqrt(var + eps) * w + bias: one block per row, the mean first, then the centred variance.
__global__ void layer_norm(const real* x, const real* w, const real* bias, real* y, int C, real eps) {
    __shared__ real scratch[32];
    const real* row = x + (long long)blockIdx.x * C;
    real s = 0;
    for (int i = threadIdx.x; i < C; i += blockDim.x) s += row[i];
    const real mean = block_sum(s, scratch) / C;
    real ss = 0;
    for (int i = threadIdx.x; i < C; i += blockDim.x) ss += (row[i] - mean) * (row[i] - mean);
    const real rstd = real(1) / sqrt(block_sum(ss, scratch) / C + eps);
    for (int i = threadIdx.x; i < C; i += blockDim.x) y[blockIdx.x * C + i] = (row[i] - mean) * rstd * w[i] + bias[i];
}

// y = epilogue(x W + bias) for x (B, K), W (K, N). Block (blockIdx.x, blockIdx.y): COLS columns, ROWS rows;
// thread t sums column t %% COLS over the inputs i = t / COLS, + SLICES, ... (a warp reads 4 rows of 8 adjacent
// weights: whole 32-byte sectors), then the SLICES partial sums are halved pairwise in shared memory.
__global__ void matvec(const real* x, const real* W, const real* bias, real* y, int B, int K, int N, int epilogue) {
    __shared__ real part[ROWS][SLICES][COLS];
    const int col = threadIdx.x %% COLS, slice = threadIdx.x / COLS;
    const int j = blockIdx.x * COLS + col, b0 = blockIdx.y * ROWS;
    real acc[ROWS];
    for (int r = 0; r < ROWS; r++) acc[r] = 0;
    if (j < N) {
        for (int i = slice; i < K; i += SLICES) {
            const real w = W[(long long)i * N + j];
            for (int r = 0; r < ROWS; r++)
                if (b0 + r < B) acc[r] += x[(long long)(b0 + r) * K + i] * w;
        }
    }
    for (int r = 0; r < ROWS; r++) part[r][slice][col] = acc[r];
    __syncthreads();
    for (int half = SLICES / 2; half > 0; half >>= 1) {
        if (slice < half)
            for (int r = 0; r < ROWS; r++) part[r][slice][col] += part[r][slice + half][col];
        __syncthreads();
    }
    if (slice == 0 && j < N) {
        for (int r = 0; r < ROWS && b0 + r < B; r++) {
            const real v = part[r][0][col] + bias[j];
            real* out = y + (long long)(b0 + r) * N + j;
            *out = epilogue == 1 ? gelu(v) : epilogue == 2 ? *out + v : v;
        }
    }
}

// One query token against the cache, block (head h, row b). qkv (B, 3C) is [q | k | v]; the cache (B, nh, T, hs).
// Writes k and v at pos, then: scores over 0 ... pos (a warp per key), max, exp and sum, and the output
// (thread = feature d of slice t / hs; slices over the keys), divided by the sum.
// Dynamic shared memory: (T + blockDim.x) reals.
__global__ void attention(const real* qkv, real* kc, real* vc, const int* pos, real* y, int nh, int hs, int T,
                          real scale) {
    extern __shared__ __align__(16) unsigned char smem[];
    real* score = (real*)smem;
    real* part = score + T;
    __shared__ real scratch[32];
    const int h = blockIdx.x, b = blockIdx.y, C = nh * hs, p = pos[0], n = p + 1;
    const real* q = qkv + (long long)b * 3 * C + h * hs;
    real* K = kc + (long long)(b * nh + h) * T * hs;
    real* V = vc + (long long)(b * nh + h) * T * hs;
    for (int d = threadIdx.x; d < hs; d += blockDim.x) {
        K[(long long)p * hs + d] = q[C + d];
        V[(long long)p * hs + d] = q[2 * C + d];
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    for (int t = warp; t < n; t += warps) {
        real s = 0;
        for (int d = lane; d < hs; d += 32) s += q[d] * K[(long long)t * hs + d];
        s = warp_sum(s);
        if (lane == 0) score[t] = s * scale;
    }
    __syncthreads();
    real m = NEG_INF;
    for (int t = threadIdx.x; t < n; t += blockDim.x) m = max(m, score[t]);
    m = block_max(m, scratch);
    real sum = 0;
    for (int t = threadIdx.x; t < n; t += blockDim.x) {
        const real e = exp(score[t] - m);
        score[t] = e;
        sum += e;
    }
    sum = block_sum(sum, scratch);  // its barriers also publish the exponentials
    const int d = threadIdx.x %% hs, slice = threadIdx.x / hs, slices = blockDim.x / hs;
    real acc = 0;
    if (slice < slices)
        for (int t = slice; t < n; t += slices) acc += score[t] * V[(long long)t * hs + d];
    part[threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.x < hs) {
        real total = 0;
        for (int s = 0; s < slices; s++) total += part[s * hs + threadIdx.x];
        y[(long long)b * C + h * hs + threadIdx.x] = total / sum;
    }
}

// logits[b, v] = x[b] . wte[v] for v < V, logits (B, V): a warp per vocabulary row, lanes over the features, for
// ROWS rows at once. wte may have more rows than V (a padded vocabulary: zero rows no token samples): never read.
__global__ void lm_head(const real* x, const real* wte, real* logits, int B, int V, int C) {
    const int lane = threadIdx.x & 31, v = blockIdx.x * LM_HEAD_WARPS + (threadIdx.x >> 5), b0 = blockIdx.y * ROWS;
    if (v >= V) return;
    real acc[ROWS];
    for (int r = 0; r < ROWS; r++) acc[r] = 0;
    for (int i = lane; i < C; i += 32) {
        const real w = wte[(long long)v * C + i];
        for (int r = 0; r < ROWS; r++)
            if (b0 + r < B) acc[r] += x[(long long)(b0 + r) * C + i] * w;
    }
    for (int r = 0; r < ROWS; r++) {
        const real s = warp_sum(acc[r]);
        if (lane == 0 && b0 + r < B) logits[(long long)(b0 + r) * V + v] = s;
    }
}

// The token after position pos for row b = blockIdx.x, into token[b] and out[b, pos + 1].
// params: temperature, top_k (0: off), top_p, the Philox key's two words. Greedy when temperature == 0 or
// top_k == 1: the first index of the largest logit. A row with no distribution to draw from (a NaN or +inf
// logit, or none above -inf) gets -1 in out, sampling.py's NO_TOKEN, for generate to refuse, and 0 in token, which
// the next step embeds: an id within wte. Otherwise, as models/gpt/sampling.py orders it:
// top-k keeps the keys >= the k-th largest (found bit by bit: ties all stay); e = exp((logit - max) / temperature)
// over the kept (the largest logit taken off before the division: a tiny temperature runs to exp(-inf) = 0, never
// to inf - inf); top-p keeps the tokens whose likelier mass (ties ordered by id) is below top_p of the kept mass:
// the keys above K2 (the largest key whose mass at or above it reaches top_p) and the first ties at K2; then
// u = Philox(counter = (pos + 1, b, 0, 0)) in [0, 1) times the kept mass, and the first kept token whose running
// mass in id order passes u (thread t runs over its chunk of the vocabulary).
__global__ void sample(const real* logits, const double* params, const int* pos, int* token, int* out,
                       int V, int out_len) {
    __shared__ double dscratch[33];
    __shared__ int iscratch[33];
    __shared__ real rscratch[32];
    __shared__ double tied_e;
    const real* l = logits + (long long)blockIdx.x * V;
    const double temperature = params[0], top_p = params[2];
    const int top_k = (int)params[1], next = pos[0] + 1;
    double m = NEG_INF;  // the largest logit, a NaN counted as +inf
    for (int v = threadIdx.x; v < V; v += blockDim.x) m = max(m, l[v] == l[v] ? (double)l[v] : (double)INF);
    m = block_max(m, dscratch);
    int pick;
    if (!(NEG_INF < m && m < INF)) {
        pick = -1;
    } else if (temperature == 0 || top_k == 1) {
        real best = NEG_INF;
        int at = V;
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            if (l[v] > best) { best = l[v]; at = v; }
        const real top = block_max(best, rscratch);
        pick = block_min(best == top ? at : V, iscratch);
    } else {
        const int bits = 8 * sizeof(order_t);
        order_t kth = 0;
        if (top_k > 0 && top_k < V) {
            for (int bit = bits - 1; bit >= 0; bit--) {
                const order_t cand = kth | ((order_t)1 << bit);
                int count = 0;
                for (int v = threadIdx.x; v < V; v += blockDim.x) count += order_key(l[v]) >= cand;
                if (block_sum(count, iscratch) >= top_k) kth = cand;
            }
        }
        double mass = 0;
        for (int v = threadIdx.x; v < V; v += blockDim.x)
            if (order_key(l[v]) >= kth) mass += exp(((double)l[v] - m) / temperature);
        const double kept_mass = block_sum(mass, dscratch), target = top_p * kept_mass;
        order_t k2 = kth;
        int keep_tied = 0;
        const bool nucleus = top_p < 1;
        if (nucleus) {
            k2 = 0;
            for (int bit = bits - 1; bit >= 0; bit--) {
                const order_t cand = k2 | ((order_t)1 << bit);
                double above = 0;
                for (int v = threadIdx.x; v < V; v += blockDim.x) {
                    const order_t key = order_key(l[v]);
                    if (key >= kth && key >= cand) above += exp(((double)l[v] - m) / temperature);
                }
                if (block_sum(above, dscratch) >= target) k2 = cand;
            }
            double above = 0;
            int tied = 0;
            for (int v = threadIdx.x; v < V; v += blockDim.x) {
                const order_t key = order_key(l[v]);
                if (key > k2) above += exp(((double)l[v] - m) / temperature);
                if (key == k2) { tied++; tied_e = exp(((double)l[v] - m) / temperature); }
            }
            above = block_sum(above, dscratch);
            tied = block_sum(tied, iscratch);  // its barriers also publish tied_e
            while (keep_tied < tied && above + keep_tied * tied_e < target) keep_tied++;
        }
        const int chunk = (V + blockDim.x - 1) / blockDim.x, lo = min(V, (int)threadIdx.x * chunk);
        const int hi = min(V, lo + chunk);
        int tied_here = 0, tied_total;
        for (int v = lo; v < hi; v++) tied_here += nucleus && order_key(l[v]) == k2;
        int tied_rank = block_exclusive_scan(tied_here, iscratch, &tied_total);
        double chunk_mass = 0, total;
        for (int v = lo; v < hi; v++) {
            const order_t key = order_key(l[v]);
            const bool kept = key >= kth && (!nucleus || key > k2 || (key == k2 && tied_rank++ < keep_tied));
            if (kept) chunk_mass += exp(((double)l[v] - m) / temperature);
        }
        double run = block_exclusive_scan(chunk_mass, dscratch, &total);
        const uint4 r = philox4x32(make_uint4((unsigned int)next, blockIdx.x, 0u, 0u),
                                   make_uint2((unsigned int)params[3], (unsigned int)params[4]));
        const double u = ((r.x >> 5) * 67108864.0 + (r.y >> 6)) * (1.0 / 9007199254740992.0) * total;
        tied_rank -= tied_here;  // back to the chunk's first tie: the second pass sees the same kept set
        int first = V, last = -1;
        for (int v = lo; v < hi; v++) {
            const order_t key = order_key(l[v]);
            const bool kept = key >= kth && (!nucleus || key > k2 || (key == k2 && tied_rank++ < keep_tied));
            if (!kept) continue;
            run += exp(((double)l[v] - m) / temperature);
            last = v;
            if (run > u && first == V) first = v;
        }
        first = block_min(first, iscratch);
        last = block_max(last, iscratch);
        pick = first < V ? first : last;  // u rounded up to the whole mass: the last kept token
    }
    if (threadIdx.x == 0) {
        token[blockIdx.x] = max(pick, 0);
        out[(long long)blockIdx.x * out_len + next] = pick;
    }
}

__global__ void advance(int* pos) { pos[0] += 1; }

}
""" % dict(COLS=COLS, SLICES=SLICES, ROWS=ROWS, LM_HEAD_WARPS=LM_HEAD_WARPS)

C_TYPES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}


def source(dtype):
    """The CUDA module for activations and weights of `dtype` (float32 or float64)."""
    dtype = np.dtype(dtype)
    if dtype not in C_TYPES:
        raise TypeError(f"decode kernels: dtype {dtype} is not supported; the static decode step runs float32 or "
                        "float64 models")
    return f"typedef {C_TYPES[dtype]} real;\n" + SOURCE


PHILOX_M = (0xD2511F53, 0xCD9E8D57)
PHILOX_W = (0x9E3779B9, 0xBB67AE85)
MASK32 = 0xFFFFFFFF


def philox4x32(counter, key):
    """Philox4x32-10 of `counter` (four uint32 arrays of one shape) under `key` (two ints): four uint32 arrays."""
    c0, c1, c2, c3 = (np.asarray(c, dtype=np.uint64) for c in counter)
    k0, k1 = np.uint64(key[0]), np.uint64(key[1])
    mask = np.uint64(MASK32)
    for _ in range(10):
        p0, p1 = np.uint64(PHILOX_M[0]) * c0, np.uint64(PHILOX_M[1]) * c2  # exact: both factors < 2³²
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & mask, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & mask
        k0, k1 = (k0 + np.uint64(PHILOX_W[0])) & mask, (k1 + np.uint64(PHILOX_W[1])) & mask
    return tuple(c.astype(np.uint32) for c in (c0, c1, c2, c3))


def uniform(positions, rows, key):
    """The kernel's draw in [0, 1) for each (position, row): 53 bits from Philox's first two words."""
    positions, rows = np.broadcast_arrays(np.asarray(positions, np.uint32), np.asarray(rows, np.uint32))
    zeros = np.zeros(positions.shape, np.uint32)
    x, y, _, _ = philox4x32((positions, rows, zeros, zeros), key)
    return ((x >> 5).astype(np.float64) * 67108864.0 + (y >> 6)) / 9007199254740992.0


def order_key(values):
    """The kernel's order_key: unsigned integers in the order of the floats (float32 or float64)."""
    unsigned = {4: np.uint32, 8: np.uint64}[values.dtype.itemsize]
    bits = values.view(unsigned)
    sign = unsigned(1) << unsigned(8 * values.dtype.itemsize - 1)
    return np.where(bits & sign, ~bits, bits | sign)


def _largest_key(keys, reaches):
    """Per row, the largest key K with reaches(K (B, 1)) true, found bit by bit from the top, as the kernel does."""
    kind = keys.dtype.type
    found = np.zeros((len(keys), 1), keys.dtype)
    for bit in reversed(range(8 * keys.dtype.itemsize)):
        cand = found | (kind(1) << kind(bit))
        found = np.where(reaches(cand), cand, found)
    return found


class NumpyKernels:
    """The decode kernels as NumPy functions on host arrays: same arguments, same order of work as SOURCE."""

    def __init__(self, eps):
        self.eps = eps  # layer norm's; the other kernels read their sizes from their arrays' shapes

    def embed(self, token, pos, wte, wpe, x):
        x[...] = wte[token] + wpe[pos[0]]

    def layer_norm(self, x, w, bias, y):
        mean = x.sum(axis=1, keepdims=True) / x.shape[1]
        var = ((x - mean) ** 2).sum(axis=1, keepdims=True) / x.shape[1]
        y[...] = (x - mean) * (1 / np.sqrt(var + x.dtype.type(self.eps))) * w + bias

    def matvec(self, x, W, bias, y, epilogue):
        """Slice s sums the inputs i ≡ s (mod SLICES); the SLICES partial sums are halved pairwise."""
        (B, K), N = x.shape, W.shape[1]
        pad = -K % SLICES
        xs = np.pad(x, ((0, 0), (0, pad))).reshape(B, -1, SLICES)  # (B, K / SLICES, SLICES)
        Ws = np.pad(W, ((0, pad), (0, 0))).reshape(-1, SLICES, N)
        part = np.einsum("bis,isn->bsn", xs, Ws)  # (B, SLICES, N)
        while part.shape[1] > 1:
            half = part.shape[1] // 2
            part = part[:, :half] + part[:, half:]
        v = part[:, 0] + bias
        if epilogue == GELU:
            c, a = x.dtype.type(0.7978845608028654), x.dtype.type(0.044715)
            y[...] = 0.5 * v * (1 + np.tanh(c * (v + a * v * v * v)))
        elif epilogue == RESIDUAL:
            y += v
        else:
            y[...] = v

    def attention(self, qkv, keys, values, pos, y):
        B, nh, T, hs = keys.shape
        p, C = pos[0], nh * hs
        q, k, v = (qkv[:, i * C:(i + 1) * C].reshape(B, nh, hs) for i in range(3))
        keys[:, :, p], values[:, :, p] = k, v
        scores = np.einsum("bhd,bhtd->bht", q, keys[:, :, :p + 1]) * qkv.dtype.type(1 / math.sqrt(hs))
        e = np.exp(scores - scores.max(axis=-1, keepdims=True))
        out = np.einsum("bht,bhtd->bhd", e, values[:, :, :p + 1]) / e.sum(axis=-1)[..., None]
        y[...] = out.reshape(B, C)

    def lm_head(self, x, wte, logits):
        """Only wte's first V rows, logits (B, V): a padded vocabulary's extra rows are never scored."""
        logits[...] = x @ wte[:logits.shape[1]].T

    def sample(self, logits, params, pos, token, out):
        out[:, pos[0] + 1] = picks = sample_rows(logits, params, pos[0] + 1)
        token[...] = np.maximum(picks, 0)  # the next step embeds an id within wte; out keeps NO_TOKEN

    def advance(self, pos):
        pos[0] += 1


def sample_rows(logits, params, position):
    """The `sample` kernel for every row of `logits` (B, V) at once: the token at `position` for each row, or
    NO_TOKEN for a row with no distribution to draw from (a NaN or +inf logit, or none above -inf)."""
    temperature, top_k, top_p, key0, key1 = (float(p) for p in params)
    usable = np.isfinite(logits.max(axis=1))  # NaN where the row holds one
    if temperature == 0 or top_k == 1:
        return np.where(usable, logits.argmax(axis=1), NO_TOKEN)
    kept, e = kept_tokens(logits, temperature, int(top_k), top_p)
    B, V = logits.shape
    chunk = -(-V // SAMPLE_THREADS)  # threads past the last chunk own nothing
    mass = np.pad(np.where(kept, e, 0), ((0, 0), (0, -V % chunk))).reshape(B, -1, chunk)
    within = np.cumsum(mass, axis=2)  # each thread's running mass over its chunk, in id order
    before = np.cumsum(within[:, :, -1], axis=1) - within[:, :, -1]  # the exclusive scan of the chunks' masses
    total = (before[:, -1] + within[:, -1, -1])[:, None]
    run = (before[:, :, None] + within).reshape(B, -1)[:, :V]
    u = uniform(position, np.arange(B), (int(key0), int(key1)))[:, None] * total
    passed = kept & (run > u)
    last = V - 1 - np.argmax(kept[:, ::-1], axis=1)
    return np.where(usable, np.where(passed.any(axis=1), np.argmax(passed, axis=1), last), NO_TOKEN)


def kept_tokens(logits, temperature, top_k, top_p):
    """The tokens `sample` may draw (B, V) bool, and their unnormalised probabilities exp(x − max) (B, V).

    top_k = 0 or ≥ V and top_p = 1 keep every token.
    """
    B, V = logits.shape
    keys = order_key(np.ascontiguousarray(logits))
    kth = np.zeros((B, 1), keys.dtype)
    if 0 < top_k < V:
        kth = _largest_key(keys, lambda cand: (keys >= cand).sum(axis=1, keepdims=True) >= top_k)
    x = logits.astype(np.float64)
    # the max first, then the division: a tiny temperature runs to -inf, not inf - inf (a NO_TOKEN row's NaNs too)
    with np.errstate(over="ignore", invalid="ignore"):
        e = np.exp((x - x.max(axis=1, keepdims=True)) / temperature)
    kept = keys >= kth
    if top_p < 1:
        target = top_p * np.where(kept, e, 0).sum(axis=1, keepdims=True)
        k2 = _largest_key(keys, lambda cand: np.where(kept & (keys >= cand), e, 0).sum(axis=1, keepdims=True)
                          >= target)
        above = np.where(keys > k2, e, 0).sum(axis=1, keepdims=True)
        tied = keys == k2
        tied_e = np.where(tied, e, 0).max(axis=1, keepdims=True)
        n_tied = tied.sum(axis=1, keepdims=True)
        keep_tied = np.zeros_like(n_tied)
        for _ in range(int(n_tied.max())):  # the kernel's while loop, every row in step
            keep_tied += (keep_tied < n_tied) & (above + keep_tied * tied_e < target)
        tie_rank = np.cumsum(tied, axis=1) - tied  # ties before each token, in id order
        kept = (keys > k2) | (tied & (tie_rank < keep_tied))
    return kept, e


class CudaKernels:
    """The same methods as NumpyKernels, launching SOURCE's kernels on CuPy's current stream (capturable)."""

    def __init__(self, head_size, eps, dtype):
        real = np.dtype(dtype).type
        self.eps, self.scale = real(eps), real(1 / math.sqrt(head_size))
        module = backend.xp_for("cuda").RawModule(code=source(dtype), options=("--std=c++14",))
        self.fn = {name: module.get_function(name) for name in THREADS}  # compiled here, never inside a capture

    def _launch(self, name, grid, *args, shared_mem=0):
        """Kernel `name` over `grid` blocks of THREADS[name]; Python ints become the kernels' int parameters."""
        args = tuple(np.int32(a) if isinstance(a, int) else a for a in args)
        self.fn[name](grid, (THREADS[name],), args, shared_mem=shared_mem)

    def embed(self, token, pos, wte, wpe, x):
        self._launch("embed", (x.shape[0],), token, pos, wte, wpe, x, x.shape[1])

    def layer_norm(self, x, w, bias, y):
        self._launch("layer_norm", (x.shape[0],), x, w, bias, y, x.shape[1], self.eps)

    def matvec(self, x, W, bias, y, epilogue):
        (B, K), N = x.shape, W.shape[1]
        self._launch("matvec", (-(-N // COLS), -(-B // ROWS)), x, W, bias, y, B, K, N, epilogue)

    def attention(self, qkv, keys, values, pos, y):
        B, nh, T, hs = keys.shape
        self._launch("attention", (nh, B), qkv, keys, values, pos, y, nh, hs, T, self.scale,
                     shared_mem=(T + ATTENTION_THREADS) * keys.itemsize)

    def lm_head(self, x, wte, logits):
        (B, C), V = x.shape, logits.shape[1]  # the real vocabulary: wte may hold padding rows past it
        assert wte.shape[0] >= V, (wte.shape, logits.shape)
        self._launch("lm_head", (-(-V // LM_HEAD_WARPS), -(-B // ROWS)), x, wte, logits, B, V, C)

    def sample(self, logits, params, pos, token, out):
        B, V = logits.shape
        self._launch("sample", (B,), logits, params, pos, token, out, V, out.shape[1])

    def advance(self, pos):
        self._launch("advance", (1,), pos)
