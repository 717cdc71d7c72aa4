// A work item's row block and the elementwise passes over its transposed tiles (keys x query lanes): the keep
// rule and the count of kept keys, the logit dropout, the shifted exponentials, and the bound that ends the walk
// once no key further left can carry weight.
//
// The keep rule is naive.keep_mask's: key j is kept for query i (d = i - j) iff 0 <= d, d < sliding_window (if
// > 0), (s_ij > threshold or d < local_window) and, with documents, i and j carry the same non-negative id.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "params.h"
#include "simd.h"

namespace tra {

constexpr int BC = 64;  // keys per block
// Vectors of query rows per block: 256 bytes of lanes (64 fp32 rows, 32 fp64) on every target, so a key block read
// from memory serves as many rows everywhere. The keep pass walks them in groups of KEEP_GROUP vectors, whose
// carry, running maximum and gate stay in registers over a tile's keys.
constexpr int ROW_VECTORS = 256 / VECTOR_BYTES;
constexpr int KEEP_GROUP = ROW_VECTORS < 4 ? ROW_VECTORS : 4;
template <class T> constexpr int rows_per_block() { return ROW_VECTORS * lanes<T>(); }  // BR

// What every tile of one work item (n, rows [r0, r0 + rows)) shares: the rows' positions, gates, documents and
// dropout keys, lane by lane (lanes beyond ``rows`` are padding: left of every key, they keep nothing).
template <class T> struct RowBlock {
  static constexpr int BR = rows_per_block<T>();
  const Params& p;
  int64_t n, b, r0;
  int rows;
  alignas(64) Int<T> pos[BR];    // absolute position of each row (-2^30 for padding lanes)
  alignas(64) Int<T> qid[BR];    // document of each row
  alignas(64) uint32_t dkey[BR];  // dropout row key
  alignas(64) T gate[BR];
  alignas(64) T carry[BR];       // kept keys right of the current block (counted in place)
  alignas(64) T qnorm[BR];       // |scale q_i|, for the reach bound (set with the transposed q)
  int64_t jlo, jend;             // the keys any row can keep: [jlo, jend)
  int64_t first_pos, last_pos;   // positions of the first and last real row
  int64_t doc;                   // the document of every real row, or -1 (mixed, or padding among them)

  RowBlock(const Params& params, int64_t n_, int64_t r0_, const T* g)
      : p(params), n(n_), b(n_ / params.heads), r0(r0_) {
    rows = static_cast<int>(std::min<int64_t>(BR, p.sq - r0));
    const int64_t offset = p.sk - p.sq;
    int64_t first = p.sk;
    doc = p.seg_queries ? p.seg_queries[b * p.sq + r0] : 0;
    for (int i = 0; i < BR; ++i) {
      const bool real = i < rows;
      const int64_t r = r0 + i;
      pos[i] = real ? static_cast<Int<T>>(offset + r) : -(Int<T>(1) << 30);
      qid[i] = real && p.seg_queries ? p.seg_queries[b * p.sq + r] : 0;
      dkey[i] = real && p.drop_rows ? static_cast<uint32_t>(p.drop_rows[n * p.sq + r]) : 0u;
      gate[i] = real ? g[n * p.sq + r] : T(0);
      carry[i] = T(0);
      qnorm[i] = T(0);
      if (real) {
        first = std::min(first, p.seg_starts ? static_cast<int64_t>(p.seg_starts[b * p.sq + r]) : 0);
        if (qid[i] != doc || qid[i] < 0) doc = -1;
      }
    }
    first_pos = offset + r0;
    last_pos = offset + r0 + rows - 1;
    jend = last_pos + 1;
    jlo = p.sliding_window ? std::max<int64_t>(0, first_pos - p.sliding_window + 1) : 0;
    jlo = std::max(jlo, p.seg_starts ? first : 0);
  }

  // Whether keys [j0, j1) need the rule entry by entry; if not, every real row may keep each of them, and keeps
  // it iff its score is above the threshold: no key at or right of a row, none in a local window or beyond a
  // sliding one, every key of the rows' one document.
  bool needs_rule(int64_t j0, int64_t j1) const {
    if (j1 - 1 > first_pos - p.local_window) return true;
    if (p.sliding_window && last_pos - j0 >= p.sliding_window) return true;
    if (p.seg_keys) {
      if (doc < 0) return true;
      for (int64_t j = j0; j < j1; ++j)
        if (p.seg_keys[b * p.sk + j] != doc) return true;
    }
    return false;
  }
};

// Rows of a key block (keys, values or their gradients) on their way into the caches, one row per key a pass
// visits: a pass over a tile's keys is short of memory operations, and the products after it read these rows.
struct Prefetch {
  const char* base = nullptr;
  int64_t stride = 0, bytes = 0;  // from one row to the next, and of a row
  template <class T> static Prefetch rows(const T* first_row, int64_t row_stride, int64_t row_length) {
    return Prefetch{reinterpret_cast<const char*>(first_row), row_stride * int64_t(sizeof(T)),
                    row_length * int64_t(sizeof(T))};
  }
  void row(int jj) const {
    if (base)
      for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(base + jj * stride + b, 0, 3);
  }
};

// Keys [j0, j0 + nb) of a tile, right to left: which each lane keeps, its running count of kept keys (the row
// block's carry, updated), and logits s + g c into ``logits`` (-inf where not kept; it may be ``scores``); the
// counts into ``counts`` unless null, and each lane's largest logit into ``top``. With ``lse`` (the backward) the
// weights exp(l - lse) go into ``logits`` instead, those below Limits::flush 0. With ``key_scale`` (the keys'
// RMS-norm factors, from j0 on) each key's scores are its factor times ``scores``, written back. RULE: the
// per-entry keep rule (RowBlock::needs_rule), else a key is kept iff its score is above the threshold.
template <class T, bool RULE>
static void keep_and_count(RowBlock<T>& rb, int64_t j0, int nb, T* scores, T* logits, T* counts, Vec<T>* top,
                           Prefetch ahead, const T* lse, const T* key_scale) {
  constexpr int L = lanes<T>(), BR = rows_per_block<T>(), G = KEEP_GROUP;
  const Params& p = rb.p;
  const Vec<T> thr = splat(T(p.threshold)), one = splat(T(1)), zero{}, neg_inf = splat(-std::numeric_limits<T>::infinity());
  const bool docs = p.seg_keys != nullptr;
  const Int<T> local = static_cast<Int<T>>(p.local_window), sliding = static_cast<Int<T>>(p.sliding_window);
  for (int x0 = 0; x0 < ROW_VECTORS; x0 += G) {  // a group of lanes at a time, down every key
    Vec<T> carry[G], gate[G], hi[G];
    for (int x = 0; x < G; ++x)
      carry[x] = load(rb.carry + (x0 + x) * L), gate[x] = load(rb.gate + (x0 + x) * L), hi[x] = neg_inf;
    for (int jj = nb - 1; jj >= 0; --jj) {
      const int64_t j = j0 + jj;
      if (x0 == 0) ahead.row(jj);
      T* s_row = scores + jj * BR + x0 * L;
      T* l_row = logits + jj * BR + x0 * L;
      const Vec<T> factor = splat(key_scale ? key_scale[jj] : T(1));
      Int<T> kid = 0;
      Mask<T> key_real = ~Mask<T>{};
      if (RULE && docs) {
        kid = p.seg_keys[rb.b * p.sk + j];
        key_real = kid >= 0 ? ~Mask<T>{} : Mask<T>{};
      }
#pragma GCC unroll 8
      for (int x = 0; x < G; ++x) {
        Vec<T> s = load(s_row + x * L);
        if (key_scale) {
          s *= factor;
          if (s_row != l_row) store(s_row + x * L, s);
        }
        Mask<T> keep = s > thr;
        if (RULE) {
          const Mask<T> dist = load(rb.pos + (x0 + x) * L) - static_cast<Int<T>>(j);
          Mask<T> allowed = dist >= 0;
          if (sliding) allowed &= dist < sliding;
          if (docs) allowed &= key_real & (load(rb.qid + (x0 + x) * L) == kid);
          keep = allowed & (keep | (dist < local));
        }
        carry[x] += keep ? one : zero;
        const Vec<T> l = keep ? s + gate[x] * carry[x] : neg_inf;
        if (counts) store(counts + jj * BR + (x0 + x) * L, carry[x]);
        if (lse) {
          const Vec<T> w = exp_flush_nonpositive(l - load(lse + (x0 + x) * L));
          store(l_row + x * L, w <= Limits<T>::flush ? zero : w);
        } else {
          store(l_row + x * L, l);
          hi[x] = vmax(hi[x], l);
        }
      }
    }
    for (int x = 0; x < G; ++x) store(rb.carry + (x0 + x) * L, carry[x]), top[x0 + x] = hi[x];
  }
}

// The dropout's factors (1 / (1 - p) kept, 0 dropped) of one key for a vector of lanes.
static inline Vec<float> dropout_factors(const uint32_t* row_keys, uint32_t col, int64_t p32, float scale) {
  const Vec<int32_t> keeps = dropout_keeps(*reinterpret_cast<const HashVec*>(row_keys) ^ col, p32);
  return keeps ? splat(scale) : Vec<float>{};
}
static inline Vec<double> dropout_factors(const uint32_t* row_keys, uint32_t col, int64_t p32, double scale) {
  Vec<double> f;
  for (int i = 0; i < lanes<double>(); ++i) f[i] = dropout_keeps(row_keys[i] ^ col, p32) ? scale : 0.0;
  return f;
}

// The logit dropout on a tile's logits, in place: a kept key's logit times its factor (a dropped one becomes 0
// and stays in the softmax), the factors into ``factors``, each lane's largest logit into ``top``.
template <class T>
static void drop_logits(const RowBlock<T>& rb, int64_t j0, int nb, T* logits, T* factors, Vec<T>* top) {
  constexpr int L = lanes<T>(), BR = rows_per_block<T>(), NV = ROW_VECTORS;
  const Params& p = rb.p;
  const Vec<T> neg_inf = splat(-std::numeric_limits<T>::infinity());
  for (int x = 0; x < NV; ++x) top[x] = neg_inf;
  for (int jj = 0; jj < nb; ++jj) {
    const uint32_t col = static_cast<uint32_t>(p.drop_cols[j0 + jj]);
    for (int x = 0; x < NV; ++x) {
      const Vec<T> f = dropout_factors(rb.dkey + x * L, col, p.drop_p32, T(p.drop_scale));
      const Vec<T> l = load(logits + jj * BR + x * L);
      const Vec<T> dropped = l == neg_inf ? l : l * f;
      store(factors + jj * BR + x * L, f);
      store(logits + jj * BR + x * L, dropped);
      top[x] = vmax(top[x], dropped);
    }
  }
}

// tile = exp(tile - shift) in place (0 below exp_floor: -inf logits, and weights under e^-80 of the largest);
// each lane's sum of them added to ``sum``. One vector of lanes at a time down the keys, with two partial sums:
// the exponential's constants and temporaries fit 16 registers.
template <class T> static void exp_shifted(int nb, T* tile, const Vec<T>* shift, Vec<T>* sum, Prefetch ahead) {
  constexpr int L = lanes<T>(), BR = rows_per_block<T>(), NV = ROW_VECTORS;
  for (int jj = 0; jj < nb; ++jj) ahead.row(jj);
  for (int x = 0; x < NV; ++x) {
    T* column = tile + x * L;
    const Vec<T> by = shift[x];
    Vec<T> even{}, odd{};
    int jj = 0;
    for (; jj + 2 <= nb; jj += 2) {
      const Vec<T> a = exp_flush_nonpositive(load(column + jj * BR) - by);
      const Vec<T> b = exp_flush_nonpositive(load(column + (jj + 1) * BR) - by);
      store(column + jj * BR, a);
      store(column + (jj + 1) * BR, b);
      even += a;
      odd += b;
    }
    if (jj < nb) {
      const Vec<T> a = exp_flush_nonpositive(load(column + jj * BR) - by);
      store(column + jj * BR, a);
      even += a;
    }
    sum[x] += even + odd;
  }
}

// The RMS-norm factor rsqrt(mean(x^2) + eps) of a row of D.
template <class T> static inline T rms_factor(const T* x, int64_t D, T eps) {
  T sq = 0;
  for (int64_t d = 0; d < D; ++d) sq += x[d] * x[d];
  return T(1) / std::sqrt(sq / T(D) + eps);
}

// For each key of each n: with ``norm_eps`` > 0 its RMS-norm factor into ``factor`` (N x Sk); into ``kmax``
// (unless null) the largest norm of the keys up to it, normalised if so: with a row's |q| it bounds every score
// left of a key block (Cauchy-Schwarz). An orphaned work-sharing loop: call it inside a parallel region.
template <class T> static void key_pass(const Params& p, const T* k, T* kmax, T* factor) {
#pragma omp for schedule(static)
  for (int64_t n = 0; n < p.n; ++n) {
    double running = 0;
    for (int64_t j = 0; j < p.sk; ++j) {
      const T* row = p.k_rows.at(k, n, p.heads, j);
      const T f = p.norm_eps > 0 ? rms_factor(row, p.d, T(p.norm_eps)) : T(1);
      if (factor) factor[n * p.sk + j] = f;
      if (kmax) {
        double sq = 0;
        for (int64_t d = 0; d < p.d; ++d) sq += double(row[d]) * row[d];
        running = std::max(running, std::sqrt(sq) * f);
        kmax[n * p.sk + j] = T(running);
      }
    }
  }
}

// Whether every key left of the current block is out of reach of every lane: its logit s + g c, with s at most
// |scale q_i| max|k| and c at least carry_i + extra (the keys it would count), lies more than ``margin`` below
// ``level`` (the running maximum, or the log-sum-exp), so its weight is exactly 0 whatever the rest of the walk
// finds (exp_flush; the backward's flush). Lanes with ``active`` 0 (null: all real lanes) are ignored; a lane with
// level -inf (nothing kept yet) is never out of reach (bound - level is +inf). Scores are bounded with room for
// their rounding.
template <class T>
static bool out_of_reach(const RowBlock<T>& rb, T key_norm, const T* level, const T* active, T extra, T margin) {
  for (int i = 0; i < rb.rows; ++i) {
    if (active && active[i] == T(0)) continue;
    const T bound = rb.qnorm[i] * key_norm * T(1.00390625) + rb.gate[i] * (rb.carry[i] + extra);
    if (!(bound - level[i] < -margin - T(1))) return false;
  }
  return true;
}

// A key block's ``count`` rows of D (``stride`` apart) copied into ``packed`` (rows D apart): the products that
// read a block's rows again and again read them from one contiguous block, not from rows a projection's width
// apart, which map to a few cache sets and evict each other.
template <class T> static const T* packed_rows(const T* rows, int64_t stride, int count, int64_t D, T* packed) {
  if (stride == D) return rows;
  for (int j = 0; j < count; ++j) std::memcpy(packed + j * D, rows + j * stride, sizeof(T) * D);
  return packed;
}

// ``rows`` rows of x (row stride ``stride``) transposed into xt (D x BR), times ``factor`` and, with ``norm_eps`` > 0,
// RMS-normalised first (their factors into ``rms`` unless null); padding lanes zero. The lanes' norms after all
// that into ``norms`` unless null.
template <class T>
static void transpose_rows(const T* x, int64_t stride, int rows, int64_t D, T factor, T* xt, T* norms = nullptr,
                           T norm_eps = T(0), T* rms = nullptr) {
  constexpr int BR = rows_per_block<T>();
  std::memset(xt, 0, sizeof(T) * D * BR);
  for (int i = 0; i < rows; ++i) {
    const T* row = x + i * stride;
    const T f = norm_eps > 0 ? rms_factor(row, D, norm_eps) : T(1);
    if (rms) rms[i] = f;
    T sq = 0;
    for (int64_t d = 0; d < D; ++d) {
      const T v = row[d] * f * factor;
      xt[d * BR + i] = v;
      sq += v * v;
    }
    if (norms) norms[i] = std::sqrt(sq);
  }
}

}  // namespace tra
