// Fused Threshold Relative Attention for CPUs: forward, backward (exact, keep surrogate, logit dropout) and
// decoding, over flattened (N = B * H) row-major inputs in fp32 or fp64. The algorithm is the chunked path's
// (ops/tra/chunked.py; docs/carry.md, docs/backward.md, docs/cpu_op.md) in one pass per tile instead of a dozen
// PyTorch passes per strip:
//
//   a work item is (n, a block of BR query rows); its key blocks are walked from the diagonal leftwards, and each
//   row carries the number of kept keys already seen to its right, so c_ij = carry_i + (kept keys of the block
//   at or right of j). Tiles are stored transposed (key-major, query rows contiguous), which makes the in-block
//   reverse count a running vector over the block's keys, and every GEMM of the tile a register-blocked
//   micro-kernel over that contiguous row dimension.
//
// The keep rule is naive.keep_mask's: key j is kept for query i (d = i - j) iff 0 <= d, d < sliding_window (if
// > 0), (s_ij > threshold or d < local_window) and, with documents, i and j carry the same non-negative id.
// Built by ops/tra/cpu_build.py (g++ -O3 -march=native -fopenmp); OpenMP resolves to the libgomp torch loaded.
#include <omp.h>

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace {

constexpr int BC = 64;  // keys per block
constexpr int64_t DECODE_MAX_QUERIES = 4;  // a call of at most this many queries runs row by row

struct Params {
  int64_t n, heads, sq, sk, d;  // n = batch * heads
  double scale, threshold;      // threshold may be -inf
  int64_t local_window, sliding_window;
  const int32_t* seg_keys;     // (B, Sk) document ids, negative for padding; null: no documents
  const int32_t* seg_queries;  // (B, Sq)
  const int32_t* seg_starts;   // (B, Sq) the leftmost key each query can keep (Sk: none)
  const int32_t* drop_rows;    // (N, Sq) the dropout hash's row keys; null: no dropout
  const int32_t* drop_cols;    // (Sk,) its column keys
  int64_t drop_p32;            // a logit is dropped iff scramble(row ^ col), as int32, < drop_p32 - 2^31
  double drop_scale;           // 1 / (1 - p)
  double tau;                  // keep surrogate temperature (0: off)
  int64_t threads;
  int64_t k_stride, v_stride;  // elements from one n to the next in k and v (rows of one n are contiguous)
  int64_t checked;             // decoding applies the non-finite contract itself (decode_row)
};

template <class T> struct V_ { typedef T type __attribute__((vector_size(64))); };
template <class T> struct VU_ { typedef T type __attribute__((vector_size(64), aligned(sizeof(T)))); };
template <class T> using Vec = typename V_<T>::type;        // an aligned vector register of T
template <class T> using VecU = typename VU_<T>::type;      // the same, loaded from any address of T

template <class T> constexpr int lanes() { return 64 / sizeof(T); }
template <class T> constexpr int rows_per_block() { return 4 * lanes<T>(); }  // BR: 64 fp32 rows, 32 fp64

#ifdef __AVX512F__
constexpr int JR = 4;  // rows of a micro-kernel: 4 x 4 accumulators fit 32 vector registers
#else
constexpr int JR = 2;  // 16 registers (AVX2): 2 x 4 (each of two halves)
#endif

template <class T> struct Limits;
template <> struct Limits<float> {
  static constexpr float exp_floor = -80.0f;     // denormals.EXP_FLOOR
  static constexpr float exp_ceil = 80.0f;       // chunked._EXP_CEIL
  static constexpr float flush = 0x1p-60f;  // denormals.FLUSH_BELOW
};
template <> struct Limits<double> {
  static constexpr double exp_floor = -700.0;
  static constexpr double exp_ceil = 80.0;
  static constexpr double flush = 0x1p-900;
};

// exp(x) for x already clamped to [exp_floor, exp_ceil]: vectorisable, within 2 ulp in fp32 (Cephes' expf
// polynomial after a round-to-nearest range reduction); fp64 calls the library.
static inline float exp_clamped(float x) {
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return p * scale;
}
static inline double exp_clamped(double x) { return std::exp(x); }

template <class T> static inline T clamp_exp(T x) {
  x = x < Limits<T>::exp_floor ? Limits<T>::exp_floor : x;
  x = x > Limits<T>::exp_ceil ? Limits<T>::exp_ceil : x;
  return exp_clamped(x);
}

// The logit dropout's factor (ops/tra/dropout.py): scramble(row ^ col) read as int32 >= p32 - 2^31 keeps it.
static inline bool dropout_keeps(uint32_t x, int64_t p32) {
  x ^= x >> 16;
  x *= 0x21F0AAADu;
  x ^= x >> 15;
  x *= 0x735A2D97u;
  return static_cast<int32_t>(x) >= static_cast<int32_t>(p32 - 2147483648LL);  // p32 - 2^31 fits an int32
}

// ---------------------------------------------------------------------------------------------------------
// Micro-kernels on transposed tiles; BR-wide rows (BR = rows_per_block<T>) are 64-byte aligned buffers.

// C (nb x BR) = A (nb x D, row stride D) . BT (D x BR): scores S^T = K Q^T, and dP^T = V dO^T.
template <class T, int R>
static inline void mk_rows_times_t(int nb, int D, const T* A, const T* BT, T* C) {
  typedef Vec<T> V;
  constexpr int BR = rows_per_block<T>(), NV = 4;
  int j = 0;
  for (; j + R <= nb; j += R) {
    V acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int x = 0; x < NV; ++x) acc[r][x] = V{};
    for (int d = 0; d < D; ++d) {
      const V* b = reinterpret_cast<const V*>(BT + d * BR);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const T a = A[(j + r) * D + d];
#pragma GCC unroll 4
        for (int x = 0; x < NV; ++x) acc[r][x] += a * b[x];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int x = 0; x < NV; ++x) reinterpret_cast<V*>(C + (j + r) * BR)[x] = acc[r][x];
  }
  if (R > 1 && j < nb) mk_rows_times_t<T, 1>(nb - j, D, A + j * D, BT, C + j * BR);
}

// CT (D x BR) = CT * alpha + A^T . PT, with A (nb x D, row stride D) and PT (nb x BR): O^T += V^T P^T and
// dQ^T += K^T dS^T. alpha (BR) may be null (no rescale).
template <class T, int R>
static inline void mk_t_times_rows(int nb, int D, const T* A, const T* PT, T* CT, const T* alpha, int d0 = 0) {
  typedef Vec<T> V;
  constexpr int BR = rows_per_block<T>(), NV = 4;
  int d = d0;
  for (; d + R <= D; d += R) {
    V acc[R][NV];
    for (int r = 0; r < R; ++r)
      for (int x = 0; x < NV; ++x) {
        acc[r][x] = reinterpret_cast<const V*>(CT + (d + r) * BR)[x];
        if (alpha) acc[r][x] *= reinterpret_cast<const V*>(alpha)[x];
      }
    for (int j = 0; j < nb; ++j) {
      const V* p = reinterpret_cast<const V*>(PT + j * BR);
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const T a = A[j * D + d + r];
#pragma GCC unroll 4
        for (int x = 0; x < NV; ++x) acc[r][x] += a * p[x];
      }
    }
    for (int r = 0; r < R; ++r)
      for (int x = 0; x < NV; ++x) reinterpret_cast<V*>(CT + (d + r) * BR)[x] = acc[r][x];
  }
  if (R > 1 && d < D) mk_t_times_rows<T, 1>(nb, D, A, PT, CT, alpha, d);
}

// C[:, d0 : d0 + NV lanes] += PT (nb x BR) . B[:, same columns], B (rows x D, row stride D): NV vectors of the
// head dimension per pass, JR keys at a time.
template <class T, int NV>
static inline void mk_t_rows_acc_cols(int nb, int rows, int D, int d0, const T* PT, const T* B, T* C) {
  typedef VecU<T> U;
  constexpr int L = lanes<T>(), BR = rows_per_block<T>();
  int j = 0;
  for (; j + JR <= nb; j += JR) {
    U acc[JR][NV];
    for (int r = 0; r < JR; ++r)
      for (int x = 0; x < NV; ++x) acc[r][x] = *reinterpret_cast<const U*>(C + (j + r) * D + d0 + x * L);
    for (int i = 0; i < rows; ++i) {
      const U* b = reinterpret_cast<const U*>(B + i * D + d0);
      U bx[NV];
      for (int x = 0; x < NV; ++x) bx[x] = b[x];
#pragma GCC unroll 8
      for (int r = 0; r < JR; ++r) {
        const T p = PT[(j + r) * BR + i];
#pragma GCC unroll 4
        for (int x = 0; x < NV; ++x) acc[r][x] += p * bx[x];
      }
    }
    for (int r = 0; r < JR; ++r)
      for (int x = 0; x < NV; ++x) *reinterpret_cast<U*>(C + (j + r) * D + d0 + x * L) = acc[r][x];
  }
  for (; j < nb; ++j) {
    U acc[NV];
    for (int x = 0; x < NV; ++x) acc[x] = *reinterpret_cast<const U*>(C + j * D + d0 + x * L);
    for (int i = 0; i < rows; ++i) {
      const U* b = reinterpret_cast<const U*>(B + i * D + d0);
      const T p = PT[j * BR + i];
      for (int x = 0; x < NV; ++x) acc[x] += p * b[x];
    }
    for (int x = 0; x < NV; ++x) *reinterpret_cast<U*>(C + j * D + d0 + x * L) = acc[x];
  }
}

// C (nb x D, row stride D) += PT (nb x BR) . B (rows x D, row stride D), over the first ``rows`` columns of PT:
// dV += P dO and dK += dS Q. The head dimension in passes of 4, 2 and 1 vectors, then its scalar tail.
template <class T>
static inline void mk_t_rows_acc(int nb, int rows, int D, const T* PT, const T* B, T* C) {
  constexpr int L = lanes<T>(), BR = rows_per_block<T>();
  int d0 = 0;
  for (; d0 + 4 * L <= D; d0 += 4 * L) mk_t_rows_acc_cols<T, 4>(nb, rows, D, d0, PT, B, C);
  if (d0 + 2 * L <= D) mk_t_rows_acc_cols<T, 2>(nb, rows, D, d0, PT, B, C), d0 += 2 * L;
  if (d0 + L <= D) mk_t_rows_acc_cols<T, 1>(nb, rows, D, d0, PT, B, C), d0 += L;
  if (d0 < D) {  // the head dimension's tail
    for (int j = 0; j < nb; ++j) {
      T* c = C + j * D;
      for (int i = 0; i < rows; ++i) {
        const T p = PT[j * BR + i];
        const T* b = B + i * D;
        for (int dd = d0; dd < D; ++dd) c[dd] += p * b[dd];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------

template <class T> struct Buffer {
  T* data = nullptr;
  explicit Buffer(size_t count) {
    data = static_cast<T*>(std::aligned_alloc(64, ((count * sizeof(T) + 63) / 64) * 64));
    std::memset(data, 0, ((count * sizeof(T) + 63) / 64) * 64);
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

// What every tile of one work item (n, rows [r0, r0 + rows)) shares: the rows' positions, gates, documents and
// dropout keys, lane by lane (lanes beyond ``rows`` are padding and keep nothing).
template <class T> struct RowBlock {
  static constexpr int BR = rows_per_block<T>();
  const Params& p;
  int64_t n, b, r0;
  int rows;
  alignas(64) int32_t pos[BR];     // absolute position of each row (-2^30 for padding lanes)
  alignas(64) int32_t qid[BR];     // document of each row
  alignas(64) int32_t dkey[BR];    // dropout row key
  alignas(64) T gate[BR];
  alignas(64) T carry[BR];         // kept keys right of the current block (counted in place)
  int64_t jlo, jend;               // the keys any row can keep: [jlo, jend)

  RowBlock(const Params& params, int64_t n_, int64_t r0_, const T* g) : p(params), n(n_), b(n_ / params.heads), r0(r0_) {
    rows = static_cast<int>(std::min<int64_t>(BR, p.sq - r0));
    const int64_t offset = p.sk - p.sq;
    int64_t first = p.sk;
    for (int i = 0; i < BR; ++i) {
      const bool real = i < rows;
      const int64_t r = r0 + i;
      pos[i] = real ? static_cast<int32_t>(offset + r) : -(1 << 30);
      qid[i] = real && p.seg_queries ? p.seg_queries[b * p.sq + r] : 0;
      dkey[i] = real && p.drop_rows ? p.drop_rows[n * p.sq + r] : 0;
      gate[i] = real ? g[n * p.sq + r] : T(0);
      carry[i] = T(0);
      if (real) first = std::min(first, p.seg_starts ? static_cast<int64_t>(p.seg_starts[b * p.sq + r]) : 0);
    }
    jend = offset + r0 + rows;
    jlo = p.sliding_window ? std::max<int64_t>(0, offset + r0 - p.sliding_window + 1) : 0;
    jlo = std::max(jlo, p.seg_starts ? first : 0);
  }

};

// The forward tile: scores, keep, count and (dropped) logits of key block [j0, j0 + nb) for every lane, written
// to ST (scores), LT (logits; -inf where not kept), CT (counts) and FT (dropout factors), carry updated; the
// kept maximum per lane into bmax. Keys are visited right to left (the count runs leftwards).
template <class T>
static void tile_logits(RowBlock<T>& rb, int64_t j0, int nb, const T* ST, T* LT, T* CT, T* FT, T* bmax) {
  constexpr int BR = rows_per_block<T>();
  const Params& p = rb.p;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  // Local copies the compiler can keep apart from the tiles (no aliasing), so every lane loop vectorises.
  alignas(64) T carry[BR], gate[BR], top[BR];
  alignas(64) int32_t pos[BR], qid[BR];
  alignas(64) uint32_t dkey[BR];
  alignas(64) T factors[BR];  // the dropout's factors, where the caller keeps none
  for (int i = 0; i < BR; ++i) {
    carry[i] = rb.carry[i], gate[i] = rb.gate[i], top[i] = neg_inf, pos[i] = rb.pos[i], qid[i] = rb.qid[i];
    dkey[i] = static_cast<uint32_t>(rb.dkey[i]);
  }
  const bool docs = p.seg_keys != nullptr;
  const int32_t sliding = static_cast<int32_t>(p.sliding_window), local = static_cast<int32_t>(p.local_window);
  const T thr = T(p.threshold);
  for (int jj = nb - 1; jj >= 0; --jj) {
    const int32_t j = static_cast<int32_t>(j0 + jj);
    const T* __restrict s = ST + jj * BR;
    T* __restrict l = LT + jj * BR;
    const int32_t kid = docs ? p.seg_keys[rb.b * p.sk + j] : 0;
    const bool in_doc = !docs || kid >= 0;
#pragma omp simd
    for (int i = 0; i < BR; ++i) {
      const int32_t dist = pos[i] - j;  // the rule of naive.keep_mask; padding lanes sit left of every key
      const bool allowed = dist >= 0 && (sliding == 0 || dist < sliding) && in_doc && (!docs || kid == qid[i]);
      const bool keep = allowed && (dist < local || s[i] > thr);
      carry[i] += keep ? T(1) : T(0);
      l[i] = keep ? s[i] + gate[i] * carry[i] : neg_inf;
    }
    if (CT) {
      T* __restrict c = CT + jj * BR;
#pragma omp simd
      for (int i = 0; i < BR; ++i) c[i] = carry[i];
    }
    if (p.drop_rows) {
      const uint32_t col = static_cast<uint32_t>(p.drop_cols[j]);
      const T scale = T(p.drop_scale);
      T* __restrict f = FT ? FT + jj * BR : factors;
#pragma omp simd
      for (int i = 0; i < BR; ++i) {
        const T factor = dropout_keeps(dkey[i] ^ col, p.drop_p32) ? scale : T(0);
        f[i] = factor;
        l[i] = l[i] == neg_inf ? l[i] : l[i] * factor;
      }
    }
#pragma omp simd
    for (int i = 0; i < BR; ++i) top[i] = l[i] > top[i] ? l[i] : top[i];
  }
  for (int i = 0; i < BR; ++i) rb.carry[i] = carry[i], bmax[i] = top[i];
}

template <class T> struct Tiles {
  static constexpr int BR = rows_per_block<T>();
  // qt: the rows' scaled q, transposed; st, lt, pt, ct, ft, wt, dt: per key and row, the scores, logits (then
  // dP), weights, counts, dropout factors, the surrogate's weights (in the forward: the kept keys the dropout
  // zeroed) and dS; ot: the output accumulator, transposed; dot_, dqt: dO and dQ (in the forward: the dropped
  // kept keys' values) transposed; qs: the rows' scaled q, row-major.
  Buffer<T> qt, st, lt, pt, ct, ft, wt, dt, ot, dot_, dqt, qs;
  explicit Tiles(int64_t D, bool backward)
      : qt(D * BR), st(BC * BR), lt(BC * BR), pt(BC * BR), ct(backward ? BC * BR : 1), ft(BC * BR), wt(BC * BR),
        dt(backward ? BC * BR : 1), ot(backward ? 1 : D * BR), dot_(backward ? D * BR : 1), dqt(D * BR),
        qs(backward ? D * BR : 1) {}
};

// Rows [r0, r0 + rows) of x (N x S x D) transposed into xt (D x BR), times ``factor``; padding lanes zero.
template <class T>
static void transpose_rows(const T* x, int rows, int64_t D, T factor, T* xt) {
  constexpr int BR = rows_per_block<T>();
  std::memset(xt, 0, sizeof(T) * D * BR);
  for (int i = 0; i < rows; ++i)
    for (int64_t d = 0; d < D; ++d) xt[d * BR + i] = x[i * D + d] * factor;
}

template <class T>
static void forward_item(const Params& p, int64_t n, int64_t r0, const T* q, const T* k, const T* v, const T* g,
                         T* out, T* lse, T* mx, T* dvals, T* dcount, Tiles<T>& t) {
  constexpr int BR = rows_per_block<T>();
  const int64_t D = p.d;
  RowBlock<T> rb(p, n, r0, g);
  const T* kn = k + n * p.k_stride;
  const T* vn = v + n * p.v_stride;
  transpose_rows(q + (n * p.sq + r0) * D, rb.rows, D, T(p.scale), t.qt.data);
  std::memset(t.ot.data, 0, sizeof(T) * D * BR);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  alignas(64) T m[BR], norm[BR], bmax[BR], alpha[BR], dropped[BR];
  for (int i = 0; i < BR; ++i) m[i] = neg_inf, norm[i] = T(0), dropped[i] = T(0);
  const bool sums = dvals != nullptr;
  if (sums) std::memset(t.dqt.data, 0, sizeof(T) * D * BR);
  for (int64_t j1 = rb.jend; j1 > rb.jlo;) {
    const int64_t j0 = std::max(rb.jlo, j1 - BC);
    const int nb = static_cast<int>(j1 - j0);
    mk_rows_times_t<T, JR>(nb, static_cast<int>(D), kn + j0 * D, t.qt.data, t.st.data);
    tile_logits<T>(rb, j0, nb, t.st.data, t.lt.data, nullptr, sums ? t.ft.data : nullptr, bmax);
    if (sums) {  // the values and number of the kept keys whose logit the dropout zeroed (surrogate_backward)
      for (int jj = 0; jj < nb; ++jj) {
        const T* __restrict l = t.lt.data + jj * BR;
        const T* __restrict f = t.ft.data + jj * BR;
        T* __restrict m = t.wt.data + jj * BR;
#pragma omp simd
        for (int i = 0; i < BR; ++i) {
          m[i] = (l[i] != neg_inf && f[i] == T(0)) ? T(1) : T(0);
          dropped[i] += m[i];
        }
      }
      mk_t_times_rows<T, JR>(nb, static_cast<int>(D), vn + j0 * D, t.wt.data, t.dqt.data, nullptr);
    }
    alignas(64) T shift[BR];
#pragma omp simd
    for (int i = 0; i < BR; ++i) {
      const T m_new = bmax[i] > m[i] ? bmax[i] : m[i];
      shift[i] = m_new == neg_inf ? T(0) : m_new;
      alpha[i] = m[i] == neg_inf ? T(0) : clamp_exp(m[i] - shift[i]);
      m[i] = m_new;
    }
    for (int jj = 0; jj < nb; ++jj) {
      const T* l = t.lt.data + jj * BR;
      T* pr = t.pt.data + jj * BR;
#pragma omp simd
      for (int i = 0; i < BR; ++i) pr[i] = l[i] == neg_inf ? T(0) : clamp_exp(l[i] - shift[i]);
    }
#pragma omp simd
    for (int i = 0; i < BR; ++i) norm[i] *= alpha[i];
    for (int jj = 0; jj < nb; ++jj) {
      const T* pr = t.pt.data + jj * BR;
#pragma omp simd
      for (int i = 0; i < BR; ++i) norm[i] += pr[i];
    }
    mk_t_times_rows<T, JR>(nb, static_cast<int>(D), vn + j0 * D, t.pt.data, t.ot.data, alpha);
    j1 = j0;
  }
  for (int i = 0; i < rb.rows; ++i) {
    const int64_t row = n * p.sq + r0 + i;
    const bool has = norm[i] > T(0);
    const T inv = has ? T(1) / norm[i] : T(0);
    for (int64_t d = 0; d < D; ++d) out[row * D + d] = t.ot.data[d * BR + i] * inv;
    lse[row] = has ? m[i] + std::log(norm[i]) : std::numeric_limits<T>::infinity();
    mx[row] = m[i];
    if (sums) {
      for (int64_t d = 0; d < D; ++d) dvals[row * D + d] = t.dqt.data[d * BR + i];
      dcount[row] = dropped[i];
    }
  }
}

// The backward of one (n, query block): recompute each tile from the forward's log-sum-exp, accumulate dQ and
// the gate's gradient for the rows, dK and dV for the keys (in this item's own dk, dv: rows of one n are walked
// by one thread at a time, see tra_backward). With tau > 0 the keep surrogate's gradient is added as in
// surrogate_backward.py: e the weight every key would take, P = T - R its prefix of dZ, R carried leftwards.
template <class T>
static void backward_item(const Params& p, int64_t n, int64_t r0, const T* q, const T* k, const T* v, const T* g,
                          const T* out, const T* lse, const T* mx, const T* dvals, const T* dcount, const T* dout,
                          T* dq, T* dk, T* dv, T* dg, Tiles<T>& t) {
  constexpr int BR = rows_per_block<T>();
  const int64_t D = p.d;
  RowBlock<T> rb(p, n, r0, g);
  const T* kn = k + n * p.k_stride;
  const T* vn = v + n * p.v_stride;
  T* dkn = dk + n * p.sk * D;
  T* dvn = dv + n * p.sk * D;
  const int64_t row0 = n * p.sq + r0;
  const T scale = T(p.scale);
  transpose_rows(q + row0 * D, rb.rows, D, scale, t.qt.data);
  transpose_rows(dout + row0 * D, rb.rows, D, T(1), t.dot_.data);
  std::memset(t.dqt.data, 0, sizeof(T) * D * BR);
  T* qs = t.qs.data;  // Q scaled, row-major, for dK += dS Q
  for (int i = 0; i < rb.rows; ++i)
    for (int64_t d = 0; d < D; ++d) qs[i * D + d] = q[(row0 + i) * D + d] * scale;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T tau = T(p.tau);
  const bool surrogate = tau > T(0);
  const T cap = std::log(std::numeric_limits<T>::max()) / T(2);
  alignas(64) T lse_r[BR], delta[BR], has[BR], dgate[BR], ceiling[BR], total[BR], right[BR], bmax[BR];
  for (int i = 0; i < BR; ++i) {
    const bool real = i < rb.rows;
    const T L = real ? lse[row0 + i] : std::numeric_limits<T>::infinity();
    has[i] = (real && std::isfinite(L)) ? T(1) : T(0);
    lse_r[i] = has[i] > 0 ? L : T(0);
    T dlt = 0;
    if (real)
      for (int64_t d = 0; d < D; ++d) dlt += dout[(row0 + i) * D + d] * out[(row0 + i) * D + d];
    delta[i] = dlt;
    dgate[i] = T(0);
    right[i] = T(0);
    ceiling[i] = cap - (has[i] > 0 ? L - mx[row0 + i] : T(0));
    total[i] = T(0);
    if (surrogate && dvals && has[i] > 0) {
      T inner = dcount[row0 + i] * dlt;
      for (int64_t d = 0; d < D; ++d) inner -= dout[(row0 + i) * D + d] * dvals[(row0 + i) * D + d];
      total[i] = T(p.drop_scale) * std::exp(-L) * inner;
    }
  }
  T* factors = t.ft.data;
  T* weights = t.wt.data;
  alignas(64) T gate[BR], ones[BR];
  for (int i = 0; i < BR; ++i) gate[i] = rb.gate[i], ones[i] = T(1);
  for (int64_t j1 = rb.jend; j1 > rb.jlo;) {
    const int64_t j0 = std::max(rb.jlo, j1 - BC);
    const int nb = static_cast<int>(j1 - j0);
    mk_rows_times_t<T, JR>(nb, static_cast<int>(D), kn + j0 * D, t.qt.data, t.st.data);
    tile_logits(rb, j0, nb, t.st.data, t.lt.data, t.ct.data, p.drop_rows ? factors : nullptr, bmax);
    // P (kept weights) and, with the surrogate, e (every key's would-be weight); logits of dropped-by-rule keys
    // are recomputed for e: (s + g c) times the dropout factor, as the chunked strip holds them.
    for (int jj = 0; jj < nb; ++jj) {
      const T* l = t.lt.data + jj * BR;
      T* pr = t.pt.data + jj * BR;
      if (!surrogate) {
#pragma omp simd
        for (int i = 0; i < BR; ++i) {
          T w = (l[i] == neg_inf || has[i] == T(0)) ? T(0) : clamp_exp(l[i] - lse_r[i]);
          pr[i] = w <= Limits<T>::flush ? T(0) : w;
        }
      } else {
        const T* __restrict s = t.st.data + jj * BR;
        const T* __restrict c = t.ct.data + jj * BR;
        const T* __restrict f = p.drop_rows ? factors + jj * BR : ones;
        T* __restrict w = weights + jj * BR;
        T* __restrict pw = pr;
#pragma omp simd
        for (int i = 0; i < BR; ++i) {
          const T logit = (s[i] + gate[i] * c[i]) * f[i];
          T x = logit - lse_r[i];
          x = x < ceiling[i] ? x : ceiling[i];
          T ew = has[i] > 0 ? clamp_exp(x) : T(0);
          ew = ew <= Limits<T>::flush ? T(0) : ew;
          w[i] = ew;
          pw[i] = l[i] == neg_inf ? T(0) : ew;
        }
      }
    }
    // dP^T = V dO^T, then dZ = P (dP - Delta) (times the dropout factor), the gate's gradient sum dZ c.
    mk_rows_times_t<T, JR>(nb, static_cast<int>(D), vn + j0 * D, t.dot_.data, t.lt.data);  // lt now holds dP
    for (int jj = 0; jj < nb; ++jj) {
      T* dp = t.lt.data + jj * BR;
      const T* pr = t.pt.data + jj * BR;
      const T* c = t.ct.data + jj * BR;
      T* dz = t.dt.data + jj * BR;
      const T* f = p.drop_rows ? factors + jj * BR : nullptr;
#pragma omp simd
      for (int i = 0; i < BR; ++i) {
        dp[i] -= delta[i];
        T z = dp[i] * pr[i];
        if (f) z *= f[i];
        dz[i] = z;
        dgate[i] += z * c[i];
      }
    }
    mk_t_rows_acc<T>(nb, rb.rows, static_cast<int>(D), t.pt.data, dout + row0 * D, dvn + j0 * D);
    if (surrogate) {  // dS = dZ + sigma' ((dP - Delta) e + g (T - R)) on the entries the score decides
      const T thr = T(p.threshold);
      for (int jj = nb - 1; jj >= 0; --jj) {
        const int64_t j = j0 + jj;
        const int32_t kid = p.seg_keys ? p.seg_keys[rb.b * p.sk + j] : 0;
        const T* s = t.st.data + jj * BR;
        const T* dp = t.lt.data + jj * BR;
        const T* w = weights + jj * BR;
        T* dz = t.dt.data + jj * BR;
        const bool docs = p.seg_keys != nullptr, in_doc = !docs || kid >= 0;
        const int32_t jc = static_cast<int32_t>(j), sliding = static_cast<int32_t>(p.sliding_window);
        const int32_t local = static_cast<int32_t>(p.local_window);
#pragma omp simd
        for (int i = 0; i < BR; ++i) {
          const T prefix = total[i] - right[i];
          right[i] += dz[i];
          const int32_t dist = rb.pos[i] - jc;  // the score decides: allowed (as tile_logits) and not forced
          const bool allowed = dist >= 0 && (sliding == 0 || dist < sliding) && in_doc && (!docs || kid == rb.qid[i]);
          const bool decided = allowed && dist >= local && has[i] != T(0);
          const T sig = T(1) / (T(1) + clamp_exp((thr - s[i]) / tau));
          const T slope = decided ? sig * (T(1) - sig) / tau : T(0);
          dz[i] += slope * (dp[i] * w[i] + prefix * gate[i]);
        }
      }
    }
    mk_t_times_rows<T, JR>(nb, static_cast<int>(D), kn + j0 * D, t.dt.data, t.dqt.data, nullptr);
    mk_t_rows_acc<T>(nb, rb.rows, static_cast<int>(D), t.dt.data, qs, dkn + j0 * D);
    j1 = j0;
  }
  for (int i = 0; i < rb.rows; ++i) {
    for (int64_t d = 0; d < D; ++d) dq[(row0 + i) * D + d] = t.dqt.data[d * BR + i] * scale;
    dg[row0 + i] = dgate[i];
  }
}

// Sixteen (fp32; eight in fp64) vectors in, one out: lane i holds the sum of vector i's lanes. A transposing tree
// of shuffles and adds, about three instructions per vector where a horizontal sum each takes a dozen.
static inline Vec<float> lane_sums(Vec<float>* a) {
  typedef int32_t I __attribute__((vector_size(64)));
  const I m1a = {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30};
  const I m1b = {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31};
  const I m2a = {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29};
  const I m2b = {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31};
  const I m3a = {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27};
  const I m3b = {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31};
  const I m4a = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23};
  const I m4b = {8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31};
  Vec<float> b[8], c[4], d[2];
  for (int x = 0; x < 8; ++x) b[x] = __builtin_shuffle(a[2 * x], a[2 * x + 1], m1a) + __builtin_shuffle(a[2 * x], a[2 * x + 1], m1b);
  for (int x = 0; x < 4; ++x) c[x] = __builtin_shuffle(b[2 * x], b[2 * x + 1], m2a) + __builtin_shuffle(b[2 * x], b[2 * x + 1], m2b);
  for (int x = 0; x < 2; ++x) d[x] = __builtin_shuffle(c[2 * x], c[2 * x + 1], m3a) + __builtin_shuffle(c[2 * x], c[2 * x + 1], m3b);
  return __builtin_shuffle(d[0], d[1], m4a) + __builtin_shuffle(d[0], d[1], m4b);
}
static inline Vec<double> lane_sums(Vec<double>* a) {
  typedef int64_t I __attribute__((vector_size(64)));
  const I m1a = {0, 8, 2, 10, 4, 12, 6, 14}, m1b = {1, 9, 3, 11, 5, 13, 7, 15};
  const I m2a = {0, 1, 8, 9, 4, 5, 12, 13}, m2b = {2, 3, 10, 11, 6, 7, 14, 15};
  const I m3a = {0, 1, 2, 3, 8, 9, 10, 11}, m3b = {4, 5, 6, 7, 12, 13, 14, 15};
  Vec<double> b[4], c[2];
  for (int x = 0; x < 4; ++x) b[x] = __builtin_shuffle(a[2 * x], a[2 * x + 1], m1a) + __builtin_shuffle(a[2 * x], a[2 * x + 1], m1b);
  for (int x = 0; x < 2; ++x) c[x] = __builtin_shuffle(b[2 * x], b[2 * x + 1], m2a) + __builtin_shuffle(b[2 * x], b[2 * x + 1], m2b);
  return __builtin_shuffle(c[0], c[1], m3a) + __builtin_shuffle(c[0], c[1], m3b);
}

// scores[x] = scale * q . k_x for ``count`` keys of row stride D: a lane's worth of keys at a time, each key's
// products summed over the head dimension in a vector, the vectors reduced together (lane_sums).
template <class T>
static void row_scores(const T* q, const T* k, int64_t count, int64_t D, T scale, T* scores) {
  typedef VecU<T> U;
  constexpr int L = lanes<T>();
  const int64_t full = D / L * L;
  int64_t x = 0;
  if (full > 0) {
    for (; x + L <= count; x += L) {
      Vec<T> acc[L];
      for (int t = 0; t < L; ++t) {
        const T* kt = k + (x + t) * D;
        Vec<T> a = Vec<T>{};
        for (int64_t d = 0; d < full; d += L) a += *reinterpret_cast<const U*>(q + d) * *reinterpret_cast<const U*>(kt + d);
        acc[t] = a;
      }
      Vec<T> sums = lane_sums(acc);
      for (int t = 0; t < L; ++t) {
        T rest = 0;
        for (int64_t d = full; d < D; ++d) rest += q[d] * k[(x + t) * D + d];
        scores[x + t] = (sums[t] + rest) * scale;
      }
    }
  }
  for (; x < count; ++x) {
    const T* kx = k + x * D;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < D; ++d) s += q[d] * kx[d];
    scores[x] = s * scale;
  }
}

// o (D) = sum over x < count of w[x] v_x, v of row stride D: one head-dimension vector at a time, four keys'
// products in flight (independent accumulators in registers, not a store per key).
template <class T>
static void weighted_sum(const T* w, const T* v, int64_t count, int64_t D, T* o) {
  typedef VecU<T> U;
  constexpr int L = lanes<T>();
  int64_t d = 0;
  for (; d + L <= D; d += L) {
    Vec<T> a0{}, a1{}, a2{}, a3{};
    int64_t x = 0;
    for (; x + 4 <= count; x += 4) {
      a0 += w[x] * *reinterpret_cast<const U*>(v + x * D + d);
      a1 += w[x + 1] * *reinterpret_cast<const U*>(v + (x + 1) * D + d);
      a2 += w[x + 2] * *reinterpret_cast<const U*>(v + (x + 2) * D + d);
      a3 += w[x + 3] * *reinterpret_cast<const U*>(v + (x + 3) * D + d);
    }
    for (; x < count; ++x) a0 += w[x] * *reinterpret_cast<const U*>(v + x * D + d);
    *reinterpret_cast<U*>(o + d) = (a0 + a1) + (a2 + a3);
  }
  for (; d < D; ++d) {
    T a = 0;
    for (int64_t x = 0; x < count; ++x) a += w[x] * v[x * D + d];
    o[d] = a;
  }
}

// One query row against its keys (decoding), in branch-free passes over the row: scores, keep bits, the count
// (an integer scan leftwards), logits and their maximum, weights, then the weighted sum of every value (a zero
// weight included), vectorised over the head dimension. O(Sk) work and memory.
//
// With ``checked`` (one query per row, no documents, no sliding window: the row sees every key j <= i) the row
// applies the op's non-finite contract itself (nonfinite.py) instead of a pass over the cache beforehand: a
// non-finite q or k_j makes a score non-finite, a non-finite v_j reaches the sum through its weight (0 * inf is
// NaN), and a non-finite gate is checked; such a row is NaN, every other row is computed from finite values.
template <class T>
static void decode_row(const Params& p, int64_t n, int64_t r, const T* q, const T* k, const T* v, const T* g, T* out,
                       T* lse, T* mx, T* scores, int32_t* counts, bool checked) {
  const int64_t D = p.d, offset = p.sk - p.sq, pos = offset + r, b = n / p.heads;
  const T* qr = q + (n * p.sq + r) * D;
  const T* kn = k + n * p.k_stride;
  const T* vn = v + n * p.v_stride;
  int64_t jlo = p.sliding_window ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
  const int32_t qid = p.seg_queries ? p.seg_queries[b * p.sq + r] : 0;
  if (p.seg_starts) jlo = std::max<int64_t>(jlo, p.seg_starts[b * p.sq + r]);
  const T scale = T(p.scale), gate = g[n * p.sq + r], thr = T(p.threshold);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  T* o = out + (n * p.sq + r) * D;
  const int64_t count = std::max<int64_t>(0, pos + 1 - jlo);
  const T* kb = kn + jlo * D;
  const T* vb = vn + jlo * D;
  row_scores(qr, kb, count, D, scale, scores);
  T bad = gate * T(0);  // NaN once anything the row reads is not finite
  const int64_t local = p.local_window;
#pragma omp simd reduction(+ : bad)
  for (int64_t x = 0; x < count; ++x) {
    bad += scores[x] * T(0);
    bool keep = scores[x] > thr || pos - (jlo + x) < local;
    counts[x] = keep ? 1 : 0;
  }
  if (p.seg_keys) {
    const int32_t* kid = p.seg_keys + b * p.sk + jlo;
    for (int64_t x = 0; x < count; ++x) counts[x] &= (kid[x] >= 0 && kid[x] == qid) ? 1 : 0;
  }
  int32_t c = 0;
  for (int64_t x = count - 1; x >= 0; --x) {  // kept keys in [j, i]: one integer add per key
    const int32_t kept = counts[x];
    c += kept;
    counts[x] = kept ? c : 0;
  }
  T top = neg_inf;
#pragma omp simd reduction(max : top)
  for (int64_t x = 0; x < count; ++x) {
    const T logit = counts[x] ? scores[x] + gate * T(counts[x]) : neg_inf;
    scores[x] = logit;
    top = logit > top ? logit : top;
  }
  const T shift = top == neg_inf ? T(0) : top;
  T norm = 0;
#pragma omp simd reduction(+ : norm)
  for (int64_t x = 0; x < count; ++x) {
    const T w = counts[x] ? clamp_exp(scores[x] - shift) : T(0);
    scores[x] = w;
    norm += w;
  }
  for (int64_t d = 0; d < D; ++d) o[d] = T(0);
  if (top != neg_inf || checked) weighted_sum(scores, vb, count, D, o);
  const T inv = norm > T(0) ? T(1) / norm : T(0);
  bool poisoned = checked && !(bad == T(0));
  if (checked)
    for (int64_t d = 0; d < D; ++d) poisoned = poisoned || !(o[d] * T(0) == T(0));
  for (int64_t d = 0; d < D; ++d) o[d] = poisoned ? std::numeric_limits<T>::quiet_NaN() : o[d] * inv;
  lse[n * p.sq + r] = top == neg_inf ? std::numeric_limits<T>::infinity() : top + std::log(norm);
  mx[n * p.sq + r] = top;
}

template <class T> int64_t query_blocks(const Params& p) {
  return (p.sq + rows_per_block<T>() - 1) / rows_per_block<T>();
}

template <class T>
int decode(const Params* pp, const T* q, const T* k, const T* v, const T* g, T* out, T* lse, T* mx) {
  const Params& p = *pp;
  const int64_t items = p.n * p.sq;
  // A row streams its keys and values from memory: two threads read twice as fast once there is enough to read.
  const int threads = static_cast<int>(items * p.sk * p.d >= (1 << 16) ? std::min(p.threads, items) : 1);
#pragma omp parallel num_threads(threads)
  {
    Buffer<T> scores(static_cast<size_t>(p.sk) + 1);
    Buffer<int32_t> counts(static_cast<size_t>(p.sk) + 1);
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item)
      decode_row(p, item / p.sq, item % p.sq, q, k, v, g, out, lse, mx, scores.data, counts.data, p.checked != 0);
  }
  return 0;
}

template <class T>
int forward(const Params* pp, const T* q, const T* k, const T* v, const T* g, T* out, T* lse, T* mx, T* dvals,
            T* dcount) {
  const Params& p = *pp;
  if (p.sq <= DECODE_MAX_QUERIES && !p.drop_rows) return decode(pp, q, k, v, g, out, lse, mx);
  const int64_t blocks = query_blocks<T>(p), items = p.n * blocks;
#pragma omp parallel num_threads(static_cast<int>(p.threads))
  {
    Tiles<T> tiles(p.d, false);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t qb = blocks - 1 - item / p.n, n = item % p.n;  // the longest rows first
      forward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, out, lse, mx, dvals, dcount, tiles);
    }
  }
  return 0;
}

template <class T>
int backward(const Params* pp, const T* q, const T* k, const T* v, const T* g, const T* out, const T* lse,
             const T* mx, const T* dvals, const T* dcount, const T* dout, T* dq, T* dk, T* dv, T* dg) {
  const Params& p = *pp;
  const int64_t blocks = query_blocks<T>(p);
  std::memset(dk, 0, sizeof(T) * p.n * p.sk * p.d);
  std::memset(dv, 0, sizeof(T) * p.n * p.sk * p.d);
  // Every query block of one n adds into the same dK and dV rows: one thread walks all of an n's blocks. With
  // fewer heads than threads the items are (n, block) pairs with private dK and dV, summed afterwards.
  const int64_t threads = p.threads;
  if (p.n >= threads || blocks == 1) {
#pragma omp parallel num_threads(static_cast<int>(threads))
    {
      Tiles<T> tiles(p.d, true);
#pragma omp for schedule(dynamic, 1)
      for (int64_t n = 0; n < p.n; ++n)
        for (int64_t qb = blocks - 1; qb >= 0; --qb)
          backward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, out, lse, mx, dvals, dcount, dout, dq, dk, dv,
                        dg, tiles);
    }
    return 0;
  }
  const int64_t per = p.sk * p.d, items = p.n * blocks;
  Buffer<T> private_dk(static_cast<size_t>(threads) * p.n * per), private_dv(static_cast<size_t>(threads) * p.n * per);
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    Tiles<T> tiles(p.d, true);
    const int64_t me = omp_get_thread_num();
    T* mdk = private_dk.data + me * p.n * per;
    T* mdv = private_dv.data + me * p.n * per;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t qb = blocks - 1 - item / p.n, n = item % p.n;
      backward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, out, lse, mx, dvals, dcount, dout, dq, mdk, mdv, dg,
                    tiles);
    }
#pragma omp for schedule(static)
    for (int64_t x = 0; x < p.n * per; ++x) {
      T a = 0, c = 0;
      for (int64_t t = 0; t < threads; ++t) a += private_dk.data[t * p.n * per + x], c += private_dv.data[t * p.n * per + x];
      dk[x] = a;
      dv[x] = c;
    }
  }
  return 0;
}

}  // namespace

extern "C" {
int tra_cpu_abi_version() { return 1; }
int tra_forward_f32(const Params* p, const float* q, const float* k, const float* v, const float* g, float* out,
                    float* lse, float* mx, float* dvals, float* dcount) {
  return forward<float>(p, q, k, v, g, out, lse, mx, dvals, dcount);
}
int tra_forward_f64(const Params* p, const double* q, const double* k, const double* v, const double* g, double* out,
                    double* lse, double* mx, double* dvals, double* dcount) {
  return forward<double>(p, q, k, v, g, out, lse, mx, dvals, dcount);
}
int tra_decode_f32(const Params* p, const float* q, const float* k, const float* v, const float* g, float* out,
                   float* lse, float* mx) {
  return decode<float>(p, q, k, v, g, out, lse, mx);
}
int tra_decode_f64(const Params* p, const double* q, const double* k, const double* v, const double* g, double* out,
                   double* lse, double* mx) {
  return decode<double>(p, q, k, v, g, out, lse, mx);
}
int tra_backward_f32(const Params* p, const float* q, const float* k, const float* v, const float* g,
                     const float* out, const float* lse, const float* mx, const float* dvals, const float* dcount,
                     const float* dout, float* dq, float* dk, float* dv, float* dg) {
  return backward<float>(p, q, k, v, g, out, lse, mx, dvals, dcount, dout, dq, dk, dv, dg);
}
int tra_backward_f64(const Params* p, const double* q, const double* k, const double* v, const double* g,
                     const double* out, const double* lse, const double* mx, const double* dvals,
                     const double* dcount, const double* dout, double* dq, double* dk, double* dv, double* dg) {
  return backward<double>(p, q, k, v, g, out, lse, mx, dvals, dcount, dout, dq, dk, dv, dg);
}
}
