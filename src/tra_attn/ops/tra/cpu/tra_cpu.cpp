// Fused Threshold Relative Attention for CPUs: forward, backward (exact, keep surrogate, logit dropout) and
// decoding, over flattened (N = B * H) row-major inputs in fp32 or fp64. The algorithm is the chunked path's
// (ops/tra/chunked.py; docs/carry.md, docs/backward.md, docs/cpu_op.md) in one pass per tile instead of a dozen
// PyTorch passes per strip:
//
//   a work item is (n, a block of BR query rows); its key blocks are walked from the diagonal leftwards, and each
//   row carries the number of kept keys already seen to its right, so c_ij = carry_i + (kept keys of the block
//   at or right of j). Tiles are stored transposed (key-major, query rows contiguous), which makes the in-block
//   reverse count a running vector over the block's keys, and every product of the tile a register-blocked
//   micro-kernel (gemm.h) over that contiguous row dimension or over the head dimension.
//
// Vectors, register blocking and block sizes follow the build's instruction set (simd.h). Blocks strictly left
// of the diagonal, outside any window and within the rows' one document, keep a key on its score alone; the
// walk ends once a bound proves that no key further left carries weight (tile.h: out_of_reach).
// Built by ops/tra/cpu_build.py (g++ -O3 -march=... -fopenmp); OpenMP resolves to the libgomp torch loaded.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "decode.h"
#include "gemm.h"
#include "params.h"
#include "simd.h"
#include "tile.h"

namespace tra {
namespace {

constexpr int ABI_VERSION = 2;  // cpu_build.ABI_VERSION: bumped with any change of Params or the exported calls

template <class T> struct Tiles {
  static constexpr int BR = rows_per_block<T>();
  // qt: the rows' scaled q, transposed; st: scores, then logits, then (forward) weights; lt (backward): logits,
  // then dP; pt, ct, ft, wt, dt: per key and row, the weights, counts, dropout factors, the surrogate's weights
  // (in the forward: the kept keys the dropout zeroed) and dS; ot: the output accumulator, transposed; dot_,
  // dqt: dO and dQ (in the forward: the dropped kept keys' values) transposed; qs: the rows' scaled q, row-major.
  Buffer<T> qt, st, lt, pt, ct, ft, wt, dt, ot, dot_, dqt, qs;
  Tiles(int64_t D, bool backward)
      : qt(D * BR), st(BC * BR), lt(backward ? BC * BR : 1), pt(backward ? BC * BR : 1), ct(backward ? BC * BR : 1),
        ft(BC * BR), wt(BC * BR), dt(backward ? BC * BR : 1), ot(backward ? 1 : D * BR), dot_(backward ? D * BR : 1),
        dqt(D * BR), qs(backward ? D * BR : 1) {}
};

template <class T>
static void keep_and_count(RowBlock<T>& rb, int64_t j0, int nb, const T* scores, T* logits, T* counts, Vec<T>* top,
                           Prefetch ahead, const T* lse = nullptr) {
  if (rb.needs_rule(j0, j0 + nb))
    keep_and_count<T, true>(rb, j0, nb, scores, logits, counts, top, ahead, lse);
  else
    keep_and_count<T, false>(rb, j0, nb, scores, logits, counts, top, ahead, lse);
}

// The key block left of [j0, ...), if any: its rows to prefetch (rows of ``base``, row length D).
template <class T> static Prefetch next_block(const RowBlock<T>& rb, int64_t j0, const T* base, int64_t D) {
  return j0 - BC >= rb.jlo ? Prefetch::rows(base + (j0 - BC) * D, D) : Prefetch{};
}

template <class T>
static void forward_item(const Params& p, int64_t n, int64_t r0, const T* q, const T* k, const T* v, const T* g,
                         const T* kmax, T* out, T* lse, T* mx, T* dvals, T* dcount, Tiles<T>& t) {
  constexpr int L = lanes<T>(), BR = rows_per_block<T>(), NV = ROW_VECTORS;
  const int64_t D = p.d;
  const int d = static_cast<int>(D);
  RowBlock<T> rb(p, n, r0, g);
  const T* kn = k + n * p.k_stride;
  const T* vn = v + n * p.v_stride;
  transpose_rows(q + (n * p.sq + r0) * D, rb.rows, D, T(p.scale), t.qt.data, rb.qnorm);
  std::memset(t.ot.data, 0, sizeof(T) * D * BR);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  alignas(64) T m[BR], alpha[BR];
  Vec<T> norm[NV], dropped[NV], top[NV];
  for (int i = 0; i < BR; ++i) m[i] = neg_inf;
  for (int x = 0; x < NV; ++x) norm[x] = dropped[x] = Vec<T>{};
  const bool sums = dvals != nullptr;
  if (sums) std::memset(t.dqt.data, 0, sizeof(T) * D * BR);
  T* tile = t.st.data;
  int64_t visited = 0;
  for (int64_t j1 = rb.jend; j1 > rb.jlo;) {
    ++visited;
    const int64_t j0 = std::max(rb.jlo, j1 - BC);
    const int nb = static_cast<int>(j1 - j0);
    rows_product<T>(nb, d, kn + j0 * D, D, 1, t.qt.data, BR, tile, Into::overwrite);  // S^T = K Q^T
    keep_and_count<T>(rb, j0, nb, tile, tile, nullptr, top, Prefetch::rows(vn + j0 * D, D));  // V for O^T below
    if (p.drop_rows) drop_logits<T>(rb, j0, nb, tile, t.ft.data, top);
    if (sums) {  // the values and number of the kept keys whose logit the dropout zeroed (surrogate_backward)
      for (int jj = 0; jj < nb; ++jj)
        for (int x = 0; x < NV; ++x) {
          const Vec<T> l = load(tile + jj * BR + x * L), f = load(t.ft.data + jj * BR + x * L);
          const Vec<T> hit = (l != splat(neg_inf)) & (f == T(0)) ? splat(T(1)) : Vec<T>{};
          store(t.wt.data + jj * BR + x * L, hit);
          dropped[x] += hit;
        }
      rows_product<T>(d, nb, vn + j0 * D, 1, D, t.wt.data, BR, t.dqt.data, Into::add);
    }
    Vec<T> shift[NV];
    for (int x = 0; x < NV; ++x) {  // the online softmax: the new maximum, and the factor on what came before
      const Vec<T> m_old = load(m + x * L), m_new = vmax(m_old, top[x]);
      shift[x] = m_new == neg_inf ? Vec<T>{} : m_new;
      store(alpha + x * L, exp_flush(m_old - shift[x]));
      norm[x] *= load(alpha + x * L);
      store(m + x * L, m_new);
    }
    exp_shifted<T>(nb, tile, shift, norm, next_block(rb, j0, kn, D));  // the next tile's keys
    rows_product<T>(d, nb, vn + j0 * D, 1, D, tile, BR, t.ot.data, Into::scale_add, alpha);  // O^T += V^T P^T
    j1 = j0;
    if (!p.drop_rows && j0 > rb.jlo && out_of_reach<T>(rb, kmax[n * p.sk + j0 - 1], m, nullptr, T(1), -Limits<T>::exp_floor))
      break;
  }
  if (p.tiles) __atomic_fetch_add(p.tiles, visited, __ATOMIC_RELAXED);
  alignas(64) T norms[BR], drops[BR];
  for (int x = 0; x < NV; ++x) store(norms + x * L, norm[x]), store(drops + x * L, dropped[x]);
  for (int i = 0; i < rb.rows; ++i) {
    const int64_t row = n * p.sq + r0 + i;
    const bool has = norms[i] > T(0);
    const T inv = has ? T(1) / norms[i] : T(0);
    for (int64_t dd = 0; dd < D; ++dd) out[row * D + dd] = t.ot.data[dd * BR + i] * inv;
    lse[row] = has ? m[i] + std::log(norms[i]) : std::numeric_limits<T>::infinity();
    mx[row] = m[i];
    if (sums) {
      for (int64_t dd = 0; dd < D; ++dd) dvals[row * D + dd] = t.dqt.data[dd * BR + i];
      dcount[row] = drops[i];
    }
  }
}

// The backward of one (n, query block): recompute each tile from the forward's log-sum-exp, accumulate dQ and
// the gate's gradient for the rows, dK and dV for the keys (in this item's own dk, dv: rows of one n are walked
// by one thread at a time, see backward). With tau > 0 the keep surrogate's gradient is added as in
// surrogate_backward.py: e the weight every key would take, P = T - R its prefix of dZ, R carried leftwards.
template <class T>
static void backward_item(const Params& p, int64_t n, int64_t r0, const T* q, const T* k, const T* v, const T* g,
                          const T* kmax, const T* out, const T* lse, const T* mx, const T* dvals, const T* dcount,
                          const T* dout, T* dq, T* dk, T* dv, T* dg, Tiles<T>& t) {
  constexpr int L = lanes<T>(), BR = rows_per_block<T>(), NV = ROW_VECTORS;
  const int64_t D = p.d;
  const int d = static_cast<int>(D);
  RowBlock<T> rb(p, n, r0, g);
  const T* kn = k + n * p.k_stride;
  const T* vn = v + n * p.v_stride;
  T* dkn = dk + n * p.sk * D;
  T* dvn = dv + n * p.sk * D;
  const int64_t row0 = n * p.sq + r0;
  const T scale = T(p.scale);
  transpose_rows(q + row0 * D, rb.rows, D, scale, t.qt.data, rb.qnorm);
  transpose_rows(dout + row0 * D, rb.rows, D, T(1), t.dot_.data);
  std::memset(t.dqt.data, 0, sizeof(T) * D * BR);
  T* qs = t.qs.data;  // Q scaled, row-major, for dK += dS Q
  for (int i = 0; i < rb.rows; ++i)
    for (int64_t dd = 0; dd < D; ++dd) qs[i * D + dd] = q[(row0 + i) * D + dd] * scale;
  const T neg_inf = -std::numeric_limits<T>::infinity();
  const T tau = T(p.tau);
  const bool surrogate = tau > T(0);
  const T cap = std::log(std::numeric_limits<T>::max()) / T(2);
  alignas(64) T lse_r[BR], delta[BR], has[BR], ceiling[BR], total[BR];
  for (int i = 0; i < BR; ++i) {
    const bool real = i < rb.rows;
    const T lse_i = real ? lse[row0 + i] : std::numeric_limits<T>::infinity();
    has[i] = (real && std::isfinite(lse_i)) ? T(1) : T(0);
    lse_r[i] = has[i] > 0 ? lse_i : T(0);
    T dlt = 0;
    if (real)
      for (int64_t dd = 0; dd < D; ++dd) dlt += dout[(row0 + i) * D + dd] * out[(row0 + i) * D + dd];
    delta[i] = dlt;
    ceiling[i] = cap - (has[i] > 0 ? lse_i - mx[row0 + i] : T(0));
    total[i] = T(0);
    if (surrogate && dvals && has[i] > 0) {
      T inner = dcount[row0 + i] * dlt;
      for (int64_t dd = 0; dd < D; ++dd) inner -= dout[(row0 + i) * D + dd] * dvals[(row0 + i) * D + dd];
      total[i] = T(p.drop_scale) * std::exp(-lse_i) * inner;
    }
  }
  const Vec<T> flush = splat(Limits<T>::flush), zero{};
  Vec<T> dgate[NV], right[NV], top[NV];
  for (int x = 0; x < NV; ++x) dgate[x] = right[x] = Vec<T>{};
  const T* factors = p.drop_rows ? t.ft.data : nullptr;
  int64_t visited = 0;
  for (int64_t j1 = rb.jend; j1 > rb.jlo;) {
    ++visited;
    const int64_t j0 = std::max(rb.jlo, j1 - BC);
    const int nb = static_cast<int>(j1 - j0);
    rows_product<T>(nb, d, kn + j0 * D, D, 1, t.qt.data, BR, t.st.data, Into::overwrite);  // S^T = K Q^T
    const Prefetch values = Prefetch::rows(vn + j0 * D, D);  // for dP^T below
    if (!surrogate && !factors) {  // P itself, from the log-sum-exp
      keep_and_count<T>(rb, j0, nb, t.st.data, t.pt.data, t.ct.data, top, values, lse_r);
    } else {
      keep_and_count<T>(rb, j0, nb, t.st.data, t.lt.data, t.ct.data, top, values);
      if (factors) drop_logits<T>(rb, j0, nb, t.lt.data, t.ft.data, top);
      // P (kept weights) and, with the surrogate, e (every key's would-be weight); logits of dropped-by-rule keys
      // are recomputed for e: (s + g c) times the dropout factor, as the chunked strip holds them.
      for (int jj = 0; jj < nb; ++jj)
        for (int x = 0; x < NV; ++x) {
          const int at = jj * BR + x * L;
          const Vec<T> l = load(t.lt.data + at);
          if (!surrogate) {
            const Vec<T> w = exp_flush_nonpositive(l - load(lse_r + x * L));
            store(t.pt.data + at, w <= flush ? zero : w);
          } else {
            const Vec<T> f = factors ? load(factors + at) : splat(T(1));
            const Vec<T> logit = (load(t.st.data + at) + load(rb.gate + x * L) * load(t.ct.data + at)) * f;
            const Vec<T> e = exp_flush(vmin(logit - load(lse_r + x * L), load(ceiling + x * L)));
            const Vec<T> w = (e <= flush) | (load(has + x * L) == T(0)) ? zero : e;
            store(t.wt.data + at, w);
            store(t.pt.data + at, l == neg_inf ? zero : w);
          }
        }
    }
    // dP^T = V dO^T, then dZ = P (dP - Delta) (times the dropout factor), the gate's gradient sum dZ c.
    rows_product<T>(nb, d, vn + j0 * D, D, 1, t.dot_.data, BR, t.lt.data, Into::overwrite);  // lt now holds dP
    for (int jj = 0; jj < nb; ++jj)
      for (int x = 0; x < NV; ++x) {
        const int at = jj * BR + x * L;
        const Vec<T> dp = load(t.lt.data + at) - load(delta + x * L);
        Vec<T> z = dp * load(t.pt.data + at);
        if (factors) z *= load(factors + at);
        store(t.lt.data + at, dp);
        store(t.dt.data + at, z);
        dgate[x] += z * load(t.ct.data + at);
      }
    cols_product<T>(nb, rb.rows, d, t.pt.data, BR, dout + row0 * D, dvn + j0 * D);  // dV += P dO
    if (surrogate) {  // dS = dZ + sigma' ((dP - Delta) e + g (T - R)) on the entries the score decides
      const Vec<T> thr = splat(T(p.threshold)), inv_tau = splat(T(1) / tau), one = splat(T(1));
      const bool docs = p.seg_keys != nullptr;
      const Int<T> local = static_cast<Int<T>>(p.local_window), sliding = static_cast<Int<T>>(p.sliding_window);
      for (int jj = nb - 1; jj >= 0; --jj) {
        const int64_t j = j0 + jj;
        const Int<T> kid = docs ? p.seg_keys[rb.b * p.sk + j] : 0;
        const Mask<T> key_real = (!docs || kid >= 0) ? ~Mask<T>{} : Mask<T>{};
        for (int x = 0; x < NV; ++x) {
          const int at = jj * BR + x * L;
          const Vec<T> dz = load(t.dt.data + at);
          const Vec<T> prefix = load(total + x * L) - right[x];
          right[x] += dz;
          const Mask<T> dist = load(rb.pos + x * L) - static_cast<Int<T>>(j);  // allowed (as the keep rule) and
          Mask<T> decided = (dist >= 0) & (dist >= local) & (load(has + x * L) != T(0));  // not forced
          if (sliding) decided &= dist < sliding;
          if (docs) decided &= key_real & (load(rb.qid + x * L) == kid);
          const Vec<T> sig = one / (one + exp_clamped((thr - load(t.st.data + at)) * inv_tau));
          const Vec<T> slope = decided ? sig * (one - sig) * inv_tau : zero;
          const Vec<T> dp = load(t.lt.data + at), w = load(t.wt.data + at);
          store(t.dt.data + at, dz + slope * (dp * w + prefix * load(rb.gate + x * L)));
        }
      }
    }
    rows_product<T>(d, nb, kn + j0 * D, 1, D, t.dt.data, BR, t.dqt.data, Into::add);  // dQ^T += K^T dS^T
    cols_product<T>(nb, rb.rows, d, t.dt.data, BR, qs, dkn + j0 * D);                 // dK += dS Q
    j1 = j0;
    // Without dropout every key left of here has weight 0 (the flush) and, with the surrogate, e = 0 and a
    // prefix of zeros: nothing further left moves a gradient. The surrogate's e counts a dropped key's c as the
    // carry (extra 0), a kept key's P as carry + 1.
    if (!factors && j0 > rb.jlo &&
        out_of_reach<T>(rb, kmax[n * p.sk + j0 - 1], lse_r, has, surrogate ? T(0) : T(1),
                        -std::log(Limits<T>::flush)))
      break;
  }
  if (p.tiles) __atomic_fetch_add(p.tiles, visited, __ATOMIC_RELAXED);
  alignas(64) T dgates[BR];
  for (int x = 0; x < NV; ++x) store(dgates + x * L, dgate[x]);
  for (int i = 0; i < rb.rows; ++i) {
    for (int64_t dd = 0; dd < D; ++dd) dq[(row0 + i) * D + dd] = t.dqt.data[dd * BR + i] * scale;
    dg[row0 + i] = dgates[i];
  }
}

template <class T> int64_t query_blocks(const Params& p) {
  return (p.sq + rows_per_block<T>() - 1) / rows_per_block<T>();
}

// Whether a walk can end early: without dropout (a dropped logit is 0, whatever the distance), and with keys
// enough to skip.
static bool may_end_early(const Params& p) { return !p.drop_rows && p.sk > BC; }

template <class T>
int forward(const Params* pp, const T* q, const T* k, const T* v, const T* g, T* out, T* lse, T* mx, T* dvals,
            T* dcount) {
  const Params& p = *pp;
  if (p.sq <= DECODE_MAX_QUERIES && !p.drop_rows) return decode(pp, q, k, v, g, out, lse, mx);
  const int64_t blocks = query_blocks<T>(p), items = p.n * blocks;
  Buffer<T> kmax(may_end_early(p) ? static_cast<size_t>(p.n * p.sk) : 1);
#pragma omp parallel num_threads(static_cast<int>(p.threads))
  {
    if (may_end_early(p)) key_norm_prefix_max(p, k, kmax.data);  // ends with a barrier
    Tiles<T> tiles(p.d, false);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t qb = blocks - 1 - item / p.n, n = item % p.n;  // the longest rows first
      forward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, kmax.data, out, lse, mx, dvals, dcount, tiles);
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
  Buffer<T> kmax(may_end_early(p) ? static_cast<size_t>(p.n * p.sk) : 1);
  // Every query block of one n adds into the same dK and dV rows: one thread walks all of an n's blocks. With
  // fewer heads than threads the items are (n, block) pairs with private dK and dV, summed afterwards.
  const int64_t threads = p.threads;
  if (p.n >= threads || blocks == 1) {
#pragma omp parallel num_threads(static_cast<int>(threads))
    {
      if (may_end_early(p)) key_norm_prefix_max(p, k, kmax.data);
      Tiles<T> tiles(p.d, true);
#pragma omp for schedule(dynamic, 1)
      for (int64_t n = 0; n < p.n; ++n)
        for (int64_t qb = blocks - 1; qb >= 0; --qb)
          backward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, kmax.data, out, lse, mx, dvals, dcount, dout,
                        dq, dk, dv, dg, tiles);
    }
    return 0;
  }
  const int64_t per = p.sk * p.d, items = p.n * blocks;
  Buffer<T> private_dk(static_cast<size_t>(threads) * p.n * per), private_dv(static_cast<size_t>(threads) * p.n * per);
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    if (may_end_early(p)) key_norm_prefix_max(p, k, kmax.data);
    Tiles<T> tiles(p.d, true);
    const int64_t me = omp_get_thread_num();
    T* mdk = private_dk.data + me * p.n * per;
    T* mdv = private_dv.data + me * p.n * per;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t qb = blocks - 1 - item / p.n, n = item % p.n;
      backward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, kmax.data, out, lse, mx, dvals, dcount, dout, dq,
                    mdk, mdv, dg, tiles);
    }
#pragma omp for schedule(static)
    for (int64_t x = 0; x < p.n * per; ++x) {
      T a = 0, c = 0;
      for (int64_t th = 0; th < threads; ++th) a += private_dk.data[th * p.n * per + x], c += private_dv.data[th * p.n * per + x];
      dk[x] = a;
      dv[x] = c;
    }
  }
  return 0;
}

}  // namespace
}  // namespace tra

using tra::Params;

extern "C" {
int tra_cpu_abi_version() { return tra::ABI_VERSION; }
// The instruction set the kernels were sized for: "avx512f", "avx2", "neon" or "generic" (simd.h).
const char* tra_cpu_target() { return tra::TARGET; }
int tra_forward_f32(const Params* p, const float* q, const float* k, const float* v, const float* g, float* out,
                    float* lse, float* mx, float* dvals, float* dcount) {
  return tra::forward<float>(p, q, k, v, g, out, lse, mx, dvals, dcount);
}
int tra_forward_f64(const Params* p, const double* q, const double* k, const double* v, const double* g, double* out,
                    double* lse, double* mx, double* dvals, double* dcount) {
  return tra::forward<double>(p, q, k, v, g, out, lse, mx, dvals, dcount);
}
int tra_backward_f32(const Params* p, const float* q, const float* k, const float* v, const float* g,
                     const float* out, const float* lse, const float* mx, const float* dvals, const float* dcount,
                     const float* dout, float* dq, float* dk, float* dv, float* dg) {
  return tra::backward<float>(p, q, k, v, g, out, lse, mx, dvals, dcount, dout, dq, dk, dv, dg);
}
int tra_backward_f64(const Params* p, const double* q, const double* k, const double* v, const double* g,
                     const double* out, const double* lse, const double* mx, const double* dvals,
                     const double* dcount, const double* dout, double* dq, double* dk, double* dv, double* dg) {
  return tra::backward<double>(p, q, k, v, g, out, lse, mx, dvals, dcount, dout, dq, dk, dv, dg);
}
}
