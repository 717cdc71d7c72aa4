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
  // dqt: dO and dQ (in the forward: the dropped kept keys' values) transposed; qs: the rows' scaled q, row-major;
  // kv: a key block's rows of V (forward) or K (backward) packed (packed_rows); dos: the rows' dO, packed.
  Buffer<T> qt, st, lt, pt, ct, ft, wt, dt, ot, dot_, dqt, qs, kv, dos;
  Tiles(int64_t D, bool backward)
      : qt(D * BR), st(BC * BR), lt(backward ? BC * BR : 1), pt(backward ? BC * BR : 1), ct(backward ? BC * BR : 1),
        ft(BC * BR), wt(BC * BR), dt(backward ? BC * BR : 1), ot(backward ? 1 : D * BR), dot_(backward ? D * BR : 1),
        dqt(D * BR), qs(backward ? D * BR : 1), kv(BC * D), dos(backward ? D * BR : 1) {}
};

// What an item's tiles need of the keys beyond its own rows: per key (N x Sk) the largest norm up to it (the
// reach bound; null when no walk can end early) and, with norm_eps, the RMS-norm factor.
template <class T> struct KeyStats {
  const T* kmax;
  const T* factor;
};

template <class T>
static void keep_and_count(RowBlock<T>& rb, int64_t j0, int nb, T* scores, T* logits, T* counts, Vec<T>* top,
                           Prefetch ahead, const T* key_scale, const T* lse = nullptr) {
  if (rb.needs_rule(j0, j0 + nb))
    keep_and_count<T, true>(rb, j0, nb, scores, logits, counts, top, ahead, lse, key_scale);
  else
    keep_and_count<T, false>(rb, j0, nb, scores, logits, counts, top, ahead, lse, key_scale);
}

// The rows of key block [j0, j0 + BC) of ``base`` (rows ``stride`` apart), if the walk goes there: to prefetch.
template <class T>
static Prefetch block_rows(const RowBlock<T>& rb, int64_t j0, const T* base, int64_t stride, int64_t D) {
  return j0 >= rb.jlo ? Prefetch::rows(base + j0 * stride, stride, D) : Prefetch{};
}

template <class T>
static void forward_item(const Params& p, int64_t n, int64_t r0, const T* q, const T* k, const T* v, const T* g,
                         KeyStats<T> keys, T* out, T* lse, T* mx, T* dvals, T* dcount, Tiles<T>& t) {
  constexpr int L = lanes<T>(), BR = rows_per_block<T>(), NV = ROW_VECTORS;
  const int64_t D = p.d, ks = p.k_rows.s, vs = p.v_rows.s;
  const int d = static_cast<int>(D);
  RowBlock<T> rb(p, n, r0, g);
  const T* kn = p.k_rows.at(k, n, p.heads, 0);
  const T* vn = p.v_rows.at(v, n, p.heads, 0);
  const T* factors = keys.factor ? keys.factor + n * p.sk : nullptr;
  transpose_rows(p.q_rows.at(q, n, p.heads, r0), p.q_rows.s, rb.rows, D, T(p.scale), t.qt.data, rb.qnorm,
                 T(p.norm_eps));
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
    rows_product<T>(nb, d, kn + j0 * ks, ks, 1, t.qt.data, BR, tile, Into::overwrite);  // S^T = K Q^T
    keep_and_count<T>(rb, j0, nb, tile, tile, nullptr, top, Prefetch::rows(vn + j0 * vs, vs, D),  // V for O^T
                      factors ? factors + j0 : nullptr);
    if (p.drop_rows) drop_logits<T>(rb, j0, nb, tile, t.ft.data, top);
    if (sums) {  // the values and number of the kept keys whose logit the dropout zeroed (surrogate_backward)
      for (int jj = 0; jj < nb; ++jj)
        for (int x = 0; x < NV; ++x) {
          const Vec<T> l = load(tile + jj * BR + x * L), f = load(t.ft.data + jj * BR + x * L);
          const Vec<T> hit = (l != splat(neg_inf)) & (f == T(0)) ? splat(T(1)) : Vec<T>{};
          store(t.wt.data + jj * BR + x * L, hit);
          dropped[x] += hit;
        }
      rows_product<T>(d, nb, vn + j0 * vs, 1, vs, t.wt.data, BR, t.dqt.data, Into::add);
    }
    Vec<T> shift[NV];
    for (int x = 0; x < NV; ++x) {  // the online softmax: the new maximum, and the factor on what came before
      const Vec<T> m_old = load(m + x * L), m_new = vmax(m_old, top[x]);
      shift[x] = m_new == neg_inf ? Vec<T>{} : m_new;
      store(alpha + x * L, exp_flush(m_old - shift[x]));
      norm[x] *= load(alpha + x * L);
      store(m + x * L, m_new);
    }
    exp_shifted<T>(nb, tile, shift, norm, block_rows(rb, j0 - BC, kn, ks, D));  // the next tile's keys
    const T* vb = packed_rows(vn + j0 * vs, vs, nb, D, t.kv.data);
    rows_product<T>(d, nb, vb, 1, D, tile, BR, t.ot.data, Into::scale_add, alpha);  // O^T += V^T P^T
    j1 = j0;
    if (keys.kmax && j0 > rb.jlo &&
        out_of_reach<T>(rb, keys.kmax[n * p.sk + j0 - 1], m, nullptr, T(1), -Limits<T>::exp_floor))
      break;
  }
  if (p.tiles) __atomic_fetch_add(p.tiles, visited, __ATOMIC_RELAXED);
  alignas(64) T norms[BR], drops[BR];
  for (int x = 0; x < NV; ++x) store(norms + x * L, norm[x]), store(drops + x * L, dropped[x]);
  for (int i = 0; i < rb.rows; ++i) {
    const int64_t row = n * p.sq + r0 + i;
    const bool has = norms[i] > T(0);
    const T inv = has ? T(1) / norms[i] : T(0);
    T* o = p.o_rows.at(out, n, p.heads, r0 + i);
    for (int64_t dd = 0; dd < D; ++dd) o[dd] = t.ot.data[dd * BR + i] * inv;
    lse[row] = has ? m[i] + std::log(norms[i]) : std::numeric_limits<T>::infinity();
    mx[row] = m[i];
    if (sums) {
      for (int64_t dd = 0; dd < D; ++dd) dvals[row * D + dd] = t.dqt.data[dd * BR + i];
      dcount[row] = drops[i];
    }
  }
}

// The gradient of a row of the RMS-normalised x (y = x f, f its factor) back to x: f (dy - y mean(dy y)), in place.
template <class T> static void rms_backward(T* dy, const T* x, T f, int64_t D) {
  T dot = 0;
  for (int64_t d = 0; d < D; ++d) dot += dy[d] * x[d] * f;
  const T mean = dot / T(D);
  for (int64_t d = 0; d < D; ++d) dy[d] = f * (dy[d] - x[d] * f * mean);
}

// The backward of one (n, query block): recompute each tile from the forward's log-sum-exp, accumulate dQ and
// the gate's gradient for the rows, dK and dV for the keys (into dk, dv at rows ``dk_rows``, ``dv_rows``: rows of
// one n are walked by one thread at a time, see backward). With tau > 0 the keep surrogate's gradient is added as
// in surrogate_backward.py: e the weight every key would take, P = T - R its prefix of dZ, R carried leftwards.
// With norm_eps, dK is the gradient of the normalised keys (backward turns it into k's), dQ is q's.
template <class T>
static void backward_item(const Params& p, int64_t n, int64_t r0, const T* q, const T* k, const T* v, const T* g,
                          KeyStats<T> keys, const T* out, const T* lse, const T* mx, const T* dvals, const T* dcount,
                          const T* dout, T* dq, T* dk, Rows dk_rows, T* dv, Rows dv_rows, T* dg, Tiles<T>& t) {
  constexpr int L = lanes<T>(), BR = rows_per_block<T>(), NV = ROW_VECTORS;
  const int64_t D = p.d, ks = p.k_rows.s, vs = p.v_rows.s;
  const int d = static_cast<int>(D);
  RowBlock<T> rb(p, n, r0, g);
  const T* kn = p.k_rows.at(k, n, p.heads, 0);
  const T* vn = p.v_rows.at(v, n, p.heads, 0);
  T* dkn = dk_rows.at(dk, n, p.heads, 0);
  T* dvn = dv_rows.at(dv, n, p.heads, 0);
  const T* factors = keys.factor ? keys.factor + n * p.sk : nullptr;
  const T* q0 = p.q_rows.at(q, n, p.heads, r0);
  const T* do0 = p.do_rows.at(dout, n, p.heads, r0);
  const int64_t row0 = n * p.sq + r0;
  const T scale = T(p.scale);
  alignas(64) T q_factor[BR];
  transpose_rows(q0, p.q_rows.s, rb.rows, D, scale, t.qt.data, rb.qnorm, T(p.norm_eps), q_factor);
  transpose_rows(do0, p.do_rows.s, rb.rows, D, T(1), t.dot_.data);
  const T* dos = packed_rows(do0, p.do_rows.s, rb.rows, D, t.dos.data);  // dO's rows, for dV += P dO
  std::memset(t.dqt.data, 0, sizeof(T) * D * BR);
  T* qs = t.qs.data;  // Q scaled (and normalised), row-major, for dK += dS Q
  for (int i = 0; i < rb.rows; ++i)
    for (int64_t dd = 0; dd < D; ++dd) qs[i * D + dd] = t.qt.data[dd * BR + i];
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
    if (real) {
      const T* o = p.o_rows.at(out, n, p.heads, r0 + i);
      for (int64_t dd = 0; dd < D; ++dd) dlt += do0[i * p.do_rows.s + dd] * o[dd];
    }
    delta[i] = dlt;
    ceiling[i] = cap - (has[i] > 0 ? lse_i - mx[row0 + i] : T(0));
    total[i] = T(0);
    if (surrogate && dvals && has[i] > 0) {
      T inner = dcount[row0 + i] * dlt;
      for (int64_t dd = 0; dd < D; ++dd) inner -= do0[i * p.do_rows.s + dd] * dvals[(row0 + i) * D + dd];
      total[i] = T(p.drop_scale) * std::exp(-lse_i) * inner;
    }
  }
  const Vec<T> flush = splat(Limits<T>::flush), zero{};
  Vec<T> dgate[NV], right[NV], top[NV];
  for (int x = 0; x < NV; ++x) dgate[x] = right[x] = Vec<T>{};
  const T* drops = p.drop_rows ? t.ft.data : nullptr;
  int64_t visited = 0;
  for (int64_t j1 = rb.jend; j1 > rb.jlo;) {
    ++visited;
    const int64_t j0 = std::max(rb.jlo, j1 - BC);
    const int nb = static_cast<int>(j1 - j0);
    const T* key_scale = factors ? factors + j0 : nullptr;
    rows_product<T>(nb, d, kn + j0 * ks, ks, 1, t.qt.data, BR, t.st.data, Into::overwrite);  // S^T = K Q^T
    const Prefetch values = Prefetch::rows(vn + j0 * vs, vs, D);  // for dP^T below
    if (!surrogate && !drops) {  // P itself, from the log-sum-exp
      keep_and_count<T>(rb, j0, nb, t.st.data, t.pt.data, t.ct.data, top, values, key_scale, lse_r);
    } else {
      keep_and_count<T>(rb, j0, nb, t.st.data, t.lt.data, t.ct.data, top, values, key_scale);
      if (drops) drop_logits<T>(rb, j0, nb, t.lt.data, t.ft.data, top);
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
            const Vec<T> f = drops ? load(drops + at) : splat(T(1));
            const Vec<T> logit = (load(t.st.data + at) + load(rb.gate + x * L) * load(t.ct.data + at)) * f;
            const Vec<T> e = exp_flush(vmin(logit - load(lse_r + x * L), load(ceiling + x * L)));
            const Vec<T> w = (e <= flush) | (load(has + x * L) == T(0)) ? zero : e;
            store(t.wt.data + at, w);
            store(t.pt.data + at, l == neg_inf ? zero : w);
          }
        }
    }
    // dP^T = V dO^T, then dZ = P (dP - Delta) (times the dropout factor), the gate's gradient sum dZ c.
    rows_product<T>(nb, d, vn + j0 * vs, vs, 1, t.dot_.data, BR, t.lt.data, Into::overwrite);  // lt now holds dP
    for (int jj = 0; jj < nb; ++jj)
      for (int x = 0; x < NV; ++x) {
        const int at = jj * BR + x * L;
        const Vec<T> dp = load(t.lt.data + at) - load(delta + x * L);
        Vec<T> z = dp * load(t.pt.data + at);
        if (drops) z *= load(drops + at);
        store(t.lt.data + at, dp);
        store(t.dt.data + at, z);
        dgate[x] += z * load(t.ct.data + at);
      }
    cols_product<T>(nb, rb.rows, d, t.pt.data, BR, dos, D, dvn + j0 * dv_rows.s, dv_rows.s);  // dV += P dO
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
    cols_product<T>(nb, rb.rows, d, t.dt.data, BR, qs, D, dkn + j0 * dk_rows.s, dk_rows.s);  // dK^ += dS Q
    if (key_scale)  // dQ^T += K^T diag(f) dS^T: the normalised keys
      for (int jj = 0; jj < nb; ++jj)
        for (int x = 0; x < NV; ++x) store(t.dt.data + jj * BR + x * L, load(t.dt.data + jj * BR + x * L) * key_scale[jj]);
    const T* kb = packed_rows(kn + j0 * ks, ks, nb, D, t.kv.data);
    rows_product<T>(d, nb, kb, 1, D, t.dt.data, BR, t.dqt.data, Into::add);  // dQ^T += K^T dS^T
    j1 = j0;
    // Without dropout every key left of here has weight 0 (the flush) and, with the surrogate, e = 0 and a
    // prefix of zeros: nothing further left moves a gradient. The surrogate's e counts a dropped key's c as the
    // carry (extra 0), a kept key's P as carry + 1.
    if (keys.kmax && j0 > rb.jlo &&
        out_of_reach<T>(rb, keys.kmax[n * p.sk + j0 - 1], lse_r, has, surrogate ? T(0) : T(1),
                        -std::log(Limits<T>::flush)))
      break;
  }
  if (p.tiles) __atomic_fetch_add(p.tiles, visited, __ATOMIC_RELAXED);
  alignas(64) T dgates[BR];
  for (int x = 0; x < NV; ++x) store(dgates + x * L, dgate[x]);
  for (int i = 0; i < rb.rows; ++i) {
    T* dqi = p.dq_rows.at(dq, n, p.heads, r0 + i);
    for (int64_t dd = 0; dd < D; ++dd) dqi[dd] = t.dqt.data[dd * BR + i] * scale;
    if (p.norm_eps > 0) rms_backward(dqi, q0 + i * p.q_rows.s, q_factor[i], D);
    dg[row0 + i] = dgates[i];
  }
}

template <class T> int64_t query_blocks(const Params& p) {
  return (p.sq + rows_per_block<T>() - 1) / rows_per_block<T>();
}

// Whether a walk can end early: without dropout (a dropped logit is 0, whatever the distance), and with keys
// enough to skip.
static bool may_end_early(const Params& p) { return !p.drop_rows && p.sk > BC; }

// The per-key statistics a call needs (KeyStats), in ``kmax`` and ``factor`` (N x Sk each, allocated here).
template <class T> struct KeyBuffers {
  Buffer<T> kmax, factor;
  explicit KeyBuffers(const Params& p)
      : kmax(may_end_early(p) ? static_cast<size_t>(p.n * p.sk) : 1),
        factor(p.norm_eps > 0 ? static_cast<size_t>(p.n * p.sk) : 1) {}
  bool needed(const Params& p) const { return may_end_early(p) || p.norm_eps > 0; }
  KeyStats<T> stats(const Params& p) const {
    return {may_end_early(p) ? kmax.data : nullptr, p.norm_eps > 0 ? factor.data : nullptr};
  }
  void compute(const Params& p, const T* k) {  // inside a parallel region; ends with a barrier
    if (needed(p)) key_pass(p, k, may_end_early(p) ? kmax.data : nullptr, p.norm_eps > 0 ? factor.data : nullptr);
  }
};

template <class T>
int forward(const Params* pp, const T* q, const T* k, const T* v, const T* g, T* out, T* lse, T* mx, T* dvals,
            T* dcount) {
  const Params& p = *pp;
  if (p.sq <= DECODE_MAX_QUERIES && !p.drop_rows && p.norm_eps <= 0) return decode(pp, q, k, v, g, out, lse, mx);
  const int64_t blocks = query_blocks<T>(p), items = p.n * blocks;
  KeyBuffers<T> keys(p);
#pragma omp parallel num_threads(static_cast<int>(p.threads))
  {
    keys.compute(p, k);
    Tiles<T> tiles(p.d, false);
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      // One head's query blocks after another, the longest rows first: consecutive items walk the same keys and
      // values, which stay in the caches.
      const int64_t qb = blocks - 1 - item % blocks, n = item / blocks;
      forward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, keys.stats(p), out, lse, mx, dvals, dcount, tiles);
    }
  }
  return 0;
}

// n's dK and dV, accumulated in ``dk_n``, ``dv_n`` (Sk x D, contiguous), written to their layout in dk and dv;
// with norm_eps dK (the normalised keys' gradient until now) turned into k's on the way.
template <class T>
static void write_key_grads(const Params& p, const T* k, const KeyStats<T>& keys, const T* dk_n, const T* dv_n, T* dk,
                            T* dv, int64_t n) {
  for (int64_t j = 0; j < p.sk; ++j) {
    T* dkr = p.dk_rows.at(dk, n, p.heads, j);
    std::memcpy(dkr, dk_n + j * p.d, sizeof(T) * p.d);
    std::memcpy(p.dv_rows.at(dv, n, p.heads, j), dv_n + j * p.d, sizeof(T) * p.d);
    if (p.norm_eps > 0) rms_backward(dkr, p.k_rows.at(k, n, p.heads, j), keys.factor[n * p.sk + j], p.d);
  }
}

template <class T>
int backward(const Params* pp, const T* q, const T* k, const T* v, const T* g, const T* out, const T* lse,
             const T* mx, const T* dvals, const T* dcount, const T* dout, T* dq, T* dk, T* dv, T* dg) {
  const Params& p = *pp;
  const int64_t blocks = query_blocks<T>(p);
  KeyBuffers<T> keys(p);
  // Every query block of one n adds into the same dK and dV rows: one thread walks all of an n's blocks, adding
  // into its own contiguous rows (written out in dK's and dV's layout after them). With fewer heads than threads
  // the items are (n, block) pairs with private dK and dV, summed afterwards.
  const int64_t threads = p.threads, per = p.sk * p.d;
  if (p.n >= threads || blocks == 1) {
#pragma omp parallel num_threads(static_cast<int>(threads))
    {
      keys.compute(p, k);
      Tiles<T> tiles(p.d, true);
      Buffer<T> dk_n(static_cast<size_t>(per)), dv_n(static_cast<size_t>(per));
      const Rows one_head{0, 0, p.d};
#pragma omp for schedule(dynamic, 1)
      for (int64_t n = 0; n < p.n; ++n) {
        std::memset(dk_n.data, 0, sizeof(T) * per);
        std::memset(dv_n.data, 0, sizeof(T) * per);
        for (int64_t qb = blocks - 1; qb >= 0; --qb)
          backward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, keys.stats(p), out, lse, mx, dvals, dcount,
                        dout, dq, dk_n.data, one_head, dv_n.data, one_head, dg, tiles);
        write_key_grads(p, k, keys.stats(p), dk_n.data, dv_n.data, dk, dv, n);
      }
    }
    return 0;
  }
  const int64_t items = p.n * blocks;
  const Rows mine{p.heads * per, per, p.d};  // a thread's private dK and dV: (N, Sk, D), contiguous
  Buffer<T> private_dk(static_cast<size_t>(threads) * p.n * per), private_dv(static_cast<size_t>(threads) * p.n * per);
#pragma omp parallel num_threads(static_cast<int>(threads))
  {
    keys.compute(p, k);
    Tiles<T> tiles(p.d, true);
    const int64_t me = omp_get_thread_num();
    T* mdk = private_dk.data + me * p.n * per;
    T* mdv = private_dv.data + me * p.n * per;
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t qb = blocks - 1 - item % blocks, n = item / blocks;  // as the forward's items
      backward_item(p, n, qb * rows_per_block<T>(), q, k, v, g, keys.stats(p), out, lse, mx, dvals, dcount, dout,
                    dq, mdk, mine, mdv, mine, dg, tiles);
    }
#pragma omp for schedule(static)
    for (int64_t x = 0; x < p.n * per; ++x) {  // every thread's rows summed into the first's
      T a = 0, c = 0;
      for (int64_t th = 0; th < threads; ++th) a += private_dk.data[th * p.n * per + x], c += private_dv.data[th * p.n * per + x];
      private_dk.data[x] = a;
      private_dv.data[x] = c;
    }
#pragma omp for schedule(static)
    for (int64_t n = 0; n < p.n; ++n)
      write_key_grads(p, k, keys.stats(p), private_dk.data + n * per, private_dv.data + n * per, dk, dv, n);
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
