// Decoding: a call of a few queries runs row by row, O(Sk) work and memory per row, reading keys and values in
// place from a KV cache's buffer (each head's rows contiguous).
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>

#include "params.h"
#include "simd.h"

namespace tra {

constexpr int64_t DECODE_MAX_QUERIES = 4;  // a call of at most this many queries runs row by row

// scores[x] = scale * q . k_x for ``count`` keys, rows ``ks`` apart: a lane's worth of keys at a time, each key's
// products summed over the head dimension in a vector, the vectors reduced together (lane_sums).
template <class T>
static void row_scores(const T* q, const T* k, int64_t ks, int64_t count, int64_t D, T scale, T* scores) {
  constexpr int L = lanes<T>();
  const int64_t full = D / L * L;
  int64_t x = 0;
  if (full > 0) {
    for (; x + L <= count; x += L) {
      Vec<T> acc[L];
      for (int t = 0; t < L; ++t) {
        const T* kt = k + (x + t) * ks;
        Vec<T> a = Vec<T>{};
        for (int64_t d = 0; d < full; d += L) a += loadu(q + d) * loadu(kt + d);
        acc[t] = a;
      }
      Vec<T> sums = lane_sums<T>(acc);
      for (int t = 0; t < L; ++t) {
        T rest = 0;
        for (int64_t d = full; d < D; ++d) rest += q[d] * k[(x + t) * ks + d];
        scores[x + t] = (sums[t] + rest) * scale;
      }
    }
  }
  for (; x < count; ++x) {
    const T* kx = k + x * ks;
    T s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t d = 0; d < D; ++d) s += q[d] * kx[d];
    scores[x] = s * scale;
  }
}

// o (D) = sum over x < count of w[x] v_x, rows of v ``vs`` apart: one head-dimension vector at a time, four keys'
// products in flight (independent accumulators in registers, not a store per key).
template <class T>
static void weighted_sum(const T* w, const T* v, int64_t vs, int64_t count, int64_t D, T* o) {
  constexpr int L = lanes<T>();
  int64_t d = 0;
  for (; d + L <= D; d += L) {
    Vec<T> a0{}, a1{}, a2{}, a3{};
    int64_t x = 0;
    for (; x + 4 <= count; x += 4) {
      a0 += w[x] * loadu(v + x * vs + d);
      a1 += w[x + 1] * loadu(v + (x + 1) * vs + d);
      a2 += w[x + 2] * loadu(v + (x + 2) * vs + d);
      a3 += w[x + 3] * loadu(v + (x + 3) * vs + d);
    }
    for (; x < count; ++x) a0 += w[x] * loadu(v + x * vs + d);
    storeu(o + d, (a0 + a1) + (a2 + a3));
  }
  for (; d < D; ++d) {
    T a = 0;
    for (int64_t x = 0; x < count; ++x) a += w[x] * v[x * vs + d];
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
  const T* qr = p.q_rows.at(q, n, p.heads, r);
  const T* kn = p.k_rows.at(k, n, p.heads, 0);
  const T* vn = p.v_rows.at(v, n, p.heads, 0);
  const int64_t ks = p.k_rows.s, vs = p.v_rows.s;
  int64_t jlo = p.sliding_window ? std::max<int64_t>(0, pos - p.sliding_window + 1) : 0;
  const int32_t qid = p.seg_queries ? p.seg_queries[b * p.sq + r] : 0;
  if (p.seg_starts) jlo = std::max<int64_t>(jlo, p.seg_starts[b * p.sq + r]);
  const T scale = T(p.scale), gate = g[n * p.sq + r], thr = T(p.threshold);
  const T neg_inf = -std::numeric_limits<T>::infinity();
  T* o = p.o_rows.at(out, n, p.heads, r);
  const int64_t count = std::max<int64_t>(0, pos + 1 - jlo);
  const T* kb = kn + jlo * ks;
  const T* vb = vn + jlo * vs;
  row_scores(qr, kb, ks, count, D, scale, scores);
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
  // Weights: exp_flush takes the -inf logits of keys not kept to 0.
  constexpr int L = lanes<T>();
  Vec<T> sums{};
  int64_t x = 0;
  for (; x + L <= count; x += L) {
    const Vec<T> w = exp_flush(loadu(scores + x) - shift);
    storeu(scores + x, w);
    sums += w;
  }
  T norm = 0;
  for (int t = 0; t < L; ++t) norm += sums[t];
  for (; x < count; ++x) {
    scores[x] = exp_flush(scores[x] - shift);
    norm += scores[x];
  }
  for (int64_t d = 0; d < D; ++d) o[d] = T(0);
  if (top != neg_inf || checked) weighted_sum(scores, vb, vs, count, D, o);
  const T inv = norm > T(0) ? T(1) / norm : T(0);
  bool poisoned = checked && !(bad == T(0));
  if (checked)
    for (int64_t d = 0; d < D; ++d) poisoned = poisoned || !(o[d] * T(0) == T(0));
  for (int64_t d = 0; d < D; ++d) o[d] = poisoned ? std::numeric_limits<T>::quiet_NaN() : o[d] * inv;
  lse[n * p.sq + r] = top == neg_inf ? std::numeric_limits<T>::infinity() : top + std::log(norm);
  mx[n * p.sq + r] = top;
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

}  // namespace tra
