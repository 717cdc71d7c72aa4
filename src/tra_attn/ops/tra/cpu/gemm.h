// The tiles' matrix products as register-blocked micro-kernels: R rows of the result times NC vectors held in
// registers while the reduction runs, R * NC sized to the target's register file (simd.h).
//
//   rows_product  C (M x W) (into) A B   the vectors along W, a row block's query lanes: S^T = K Q^T and
//                 dP^T = V dO^T (A a key block, reduction over D), O^T += V^T P^T and dQ^T += K^T dS^T (A a key
//                 block read transposed, reduction over its keys)
//   cols_product  C (M x D) += A B       the vectors along the head dimension D (any D: a scalar tail; rows of B
//                                        and C at any stride):
//                 dV += P dO and dK += dS Q (A a transposed tile, reduction over the row block's lanes)
#pragma once

#include "simd.h"

namespace tra {

// Accumulators of a micro-kernel: 24 of 32 registers (AVX-512, NEON), 12 of 16 (AVX2, SSE); the rest hold the
// NC loaded vectors of B and a broadcast of A. A block of NC vectors has ACCUMULATORS / NC rows.
constexpr int ACCUMULATORS = VECTOR_REGISTERS >= 32 ? 24 : 12;
constexpr int MAX_VECTORS = VECTOR_REGISTERS >= 32 ? 4 : 2;  // NC of the widest block
template <int NC> constexpr int block_rows() { return ACCUMULATORS / NC; }

// What a rows_product does with C: overwrite it, add to it, or scale it (by alpha, per lane) and add.
enum class Into { overwrite, add, scale_add };

// C[m][x] for m < R and NC vectors of x: C (into) the sum over k < K of A[m * am + k * ak] B[k * W + x]. B and C
// are aligned, with rows of W elements.
template <class T, int R, int NC>
static inline void rows_block(int K, const T* A, int64_t am, int64_t ak, const T* B, int W, T* C, Into into,
                              const T* alpha) {
  constexpr int L = lanes<T>();
  Vec<T> acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NC; ++x) {
      acc[r][x] = into == Into::overwrite ? Vec<T>{} : load(C + r * W + x * L);
      if (into == Into::scale_add) acc[r][x] *= load(alpha + x * L);
    }
  for (int k = 0; k < K; ++k) {
    Vec<T> b[NC];
    for (int x = 0; x < NC; ++x) b[x] = load(B + k * W + x * L);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec<T> a = splat(A[r * am + k * ak]);
#pragma GCC unroll 8
      for (int x = 0; x < NC; ++x) acc[r][x] += a * b[x];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NC; ++x) store(C + r * W + x * L, acc[r][x]);
}

// The last ``rest`` (< R) rows of a chunk, in one block.
template <class T, int R, int NC>
static inline void rows_rest(int rest, int K, const T* A, int64_t am, int64_t ak, const T* B, int W, T* C, Into into,
                             const T* alpha) {
  if constexpr (R > 1) {
    if (rest == R - 1) return rows_block<T, R - 1, NC>(K, A, am, ak, B, W, C, into, alpha);
    rows_rest<T, R - 1, NC>(rest, K, A, am, ak, B, W, C, into, alpha);
  }
}

template <class T, int NC>
static inline void rows_chunk(int M, int K, const T* A, int64_t am, int64_t ak, const T* B, int W, T* C, Into into,
                              const T* alpha) {
  constexpr int R = block_rows<NC>();
  int m = 0;
  for (; m + R <= M; m += R) rows_block<T, R, NC>(K, A + m * am, am, ak, B, W, C + m * W, into, alpha);
  if (m < M) rows_rest<T, R, NC>(M - m, K, A + m * am, am, ak, B, W, C + m * W, into, alpha);
}

// C (M x W) (into) A B, A (M x K) at A[m * am + k * ak], B (K x W), W a multiple of the vector width; alpha (W
// lanes) is read only by Into::scale_add.
template <class T>
static void rows_product(int M, int K, const T* A, int64_t am, int64_t ak, const T* B, int W, T* C, Into into,
                         const T* alpha = nullptr) {
  constexpr int L = lanes<T>();
  int x = 0;
  for (; x + MAX_VECTORS * L <= W; x += MAX_VECTORS * L)
    rows_chunk<T, MAX_VECTORS>(M, K, A, am, ak, B + x, W, C + x, into, alpha + (alpha ? x : 0));
  for (; x < W; x += L) rows_chunk<T, 1>(M, K, A, am, ak, B + x, W, C + x, into, alpha + (alpha ? x : 0));
}

// C[m][x] += the sum over k < K of A[m * W + k] B[k * ldb + x] for m < R and NC vectors of x; C and B unaligned
// (rows of the inputs and gradients).
template <class T, int R, int NC>
static inline void cols_block(int K, const T* A, int W, const T* B, int64_t ldb, T* C, int64_t ldc) {
  constexpr int L = lanes<T>();
  Vec<T> acc[R][NC];
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NC; ++x) acc[r][x] = loadu(C + r * ldc + x * L);
  for (int k = 0; k < K; ++k) {
    Vec<T> b[NC];
    for (int x = 0; x < NC; ++x) b[x] = loadu(B + k * ldb + x * L);
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      const Vec<T> a = splat(A[r * W + k]);
#pragma GCC unroll 8
      for (int x = 0; x < NC; ++x) acc[r][x] += a * b[x];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int x = 0; x < NC; ++x) storeu(C + r * ldc + x * L, acc[r][x]);
}

template <class T, int R, int NC>
static inline void cols_rest(int rest, int K, const T* A, int W, const T* B, int64_t ldb, T* C, int64_t ldc) {
  if constexpr (R > 1) {
    if (rest == R - 1) return cols_block<T, R - 1, NC>(K, A, W, B, ldb, C, ldc);
    cols_rest<T, R - 1, NC>(rest, K, A, W, B, ldb, C, ldc);
  }
}

template <class T, int NC>
static inline void cols_chunk(int M, int K, const T* A, int W, const T* B, int64_t ldb, T* C, int64_t ldc) {
  constexpr int R = block_rows<NC>();
  int m = 0;
  for (; m + R <= M; m += R) cols_block<T, R, NC>(K, A + m * W, W, B, ldb, C + m * ldc, ldc);
  if (m < M) cols_rest<T, R, NC>(M - m, K, A + m * W, W, B, ldb, C + m * ldc, ldc);
}

// C (M x D, row stride ldc) += A (M x K, row stride W) B (K x D, row stride ldb): the head dimension in chunks of
// MAX_VECTORS vectors, then of 2 and 1, then its scalar tail.
template <class T>
static void cols_product(int M, int K, int D, const T* A, int W, const T* B, int64_t ldb, T* C, int64_t ldc) {
  constexpr int L = lanes<T>();
  int d = 0;
  for (; d + MAX_VECTORS * L <= D; d += MAX_VECTORS * L)
    cols_chunk<T, MAX_VECTORS>(M, K, A, W, B + d, ldb, C + d, ldc);
  if (MAX_VECTORS > 2 && d + 2 * L <= D) cols_chunk<T, 2>(M, K, A, W, B + d, ldb, C + d, ldc), d += 2 * L;
  if (d + L <= D) cols_chunk<T, 1>(M, K, A, W, B + d, ldb, C + d, ldc), d += L;
  if (d < D) {
    for (int m = 0; m < M; ++m)
      for (int k = 0; k < K; ++k) {
        const T a = A[m * W + k];
        for (int dd = d; dd < D; ++dd) C[m * ldc + dd] += a * B[k * ldb + dd];
      }
  }
}

}  // namespace tra
