// Vectors of the build's instruction set, sized at compile time: what -march (cpu_build.py) says the target has.
//
//   avx512f   32 registers of 64 bytes (x86-64-v4 and -march=native on AVX-512 CPUs)
//   avx2      16 registers of 32 bytes, with FMA (x86-64-v3: AMD Zen 1-3, most Intel client CPUs)
//   neon      32 registers of 16 bytes (aarch64: Apple silicon, Graviton, Ampere)
//   generic   16 registers of 16 bytes (anything else the compiler vectorises: x86-64 with SSE2, ...)
//
// Everything is GCC's vector extensions (also Clang's), no intrinsics: the compiler maps each operation to the
// target's instructions, and a vector is never wider than the target's registers (a 64-byte vector on AVX2 is
// split into pairs of registers, which is what made the first kernels spill there).
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace tra {

#if defined(__AVX512F__)
constexpr int VECTOR_BYTES = 64, VECTOR_REGISTERS = 32;
constexpr const char* TARGET = "avx512f";
#elif defined(__AVX2__) && defined(__FMA__)
constexpr int VECTOR_BYTES = 32, VECTOR_REGISTERS = 16;
constexpr const char* TARGET = "avx2";
#elif defined(__aarch64__) && defined(__ARM_NEON)
constexpr int VECTOR_BYTES = 16, VECTOR_REGISTERS = 32;
constexpr const char* TARGET = "neon";
#else
constexpr int VECTOR_BYTES = 16, VECTOR_REGISTERS = 16;
constexpr const char* TARGET = "generic";
#endif

// The signed integer of a lane's width: comparisons of T vectors give masks of these (-1 true, 0 false).
template <class T> struct LaneInt;
template <> struct LaneInt<float> { typedef int32_t type; };
template <> struct LaneInt<double> { typedef int64_t type; };
template <class T> using Int = typename LaneInt<T>::type;

template <class T> struct VecOf { typedef T type __attribute__((vector_size(VECTOR_BYTES))); };
template <class T> struct VecU { typedef T type __attribute__((vector_size(VECTOR_BYTES), aligned(sizeof(T)))); };
template <class T> using Vec = typename VecOf<T>::type;     // one register of T
template <class T> using Mask = Vec<Int<T>>;                // a comparison's result, lane for lane

template <class T> constexpr int lanes() { return VECTOR_BYTES / static_cast<int>(sizeof(T)); }

// A broadcast: x - 0 is x for every x (0 + x is not, for x = -0, and would keep an add).
template <class T> static inline Vec<T> splat(T x) { return x - Vec<T>{}; }
template <class T> static inline Vec<T> load(const T* p) { return *reinterpret_cast<const Vec<T>*>(p); }  // aligned
template <class T> static inline void store(T* p, Vec<T> x) { *reinterpret_cast<Vec<T>*>(p) = x; }
template <class T> static inline Vec<T> loadu(const T* p) { return *reinterpret_cast<const typename VecU<T>::type*>(p); }
template <class T> static inline void storeu(T* p, Vec<T> x) { *reinterpret_cast<typename VecU<T>::type*>(p) = x; }
template <class V> using Element = std::remove_cv_t<std::remove_reference_t<decltype(V{}[0])>>;

// max(a, b) and min(a, b), b where either is NaN. The compiler keeps ``a > b ? a : b`` on vectors as a compare and
// a blend; the target's own instruction is one.
template <class V> static inline V vmax(V a, V b) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<V, Vec<float>>) return (V)_mm512_max_ps((__m512)a, (__m512)b);
  if constexpr (std::is_same_v<V, Vec<double>>) return (V)_mm512_max_pd((__m512d)a, (__m512d)b);
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<V, Vec<float>>) return (V)_mm256_max_ps((__m256)a, (__m256)b);
  if constexpr (std::is_same_v<V, Vec<double>>) return (V)_mm256_max_pd((__m256d)a, (__m256d)b);
#endif
  return a > b ? a : b;
}
template <class V> static inline V vmin(V a, V b) {
#if defined(__AVX512F__)
  if constexpr (std::is_same_v<V, Vec<float>>) return (V)_mm512_min_ps((__m512)a, (__m512)b);
  if constexpr (std::is_same_v<V, Vec<double>>) return (V)_mm512_min_pd((__m512d)a, (__m512d)b);
#elif defined(__AVX2__)
  if constexpr (std::is_same_v<V, Vec<float>>) return (V)_mm256_min_ps((__m256)a, (__m256)b);
  if constexpr (std::is_same_v<V, Vec<double>>) return (V)_mm256_min_pd((__m256d)a, (__m256d)b);
#endif
  return a < b ? a : b;
}

template <class T> struct Limits;
template <> struct Limits<float> {
  static constexpr float exp_floor = -80.0f;  // exp of less is 0 (weights below e^-80 of the row's largest)
  static constexpr float exp_ceil = 80.0f;    // chunked._EXP_CEIL
  static constexpr float flush = 0x1p-60f;    // denormals.FLUSH_BELOW: the backward's weights below are 0
};
template <> struct Limits<double> {
  static constexpr double exp_floor = -700.0;
  static constexpr double exp_ceil = 80.0;
  static constexpr double flush = 0x1p-900;
};

// exp(x) for x in [exp_floor, exp_ceil], within 2 ulp in fp32: Cephes' expf polynomial after a round-to-nearest
// range reduction, lane for lane. fp64 calls the library per lane (fp64 is the reference's dtype, not a fast path).
static inline Vec<float> exp_in_range(Vec<float> x) {
  const Vec<float> magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const Vec<float> n = (x * 1.44269504088896341f + magic) - magic;
  const Vec<float> r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  Vec<float> p = splat(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
#if defined(__AVX512F__)
  return (Vec<float>)_mm512_scalef_ps((__m512)p, (__m512)n);  // p 2^n
#else
  // p 2^n: n added to p's exponent bits (p is within [0.7, 1.5] and n >= -116: the result is a normal number)
  return (Vec<float>)((Vec<int32_t>)p + (__builtin_convertvector(n, Vec<int32_t>) << 23));
#endif
}
static inline Vec<double> exp_in_range(Vec<double> x) {
  for (int i = 0; i < lanes<double>(); ++i) x[i] = std::exp(x[i]);
  return x;
}

// exp(x) of x clamped to [exp_floor, exp_ceil].
template <class V> static inline V exp_clamped(V x) {
  typedef Element<V> T;
  return exp_in_range(vmin(vmax(x, splat(Limits<T>::exp_floor)), splat(Limits<T>::exp_ceil)));
}

// exp(x), 0 below exp_floor (-inf included), clamped at exp_ceil; on vectors and on one value.
template <class V> static inline V exp_flush(V x) {
  return x < Limits<Element<V>>::exp_floor ? V{} : exp_clamped(x);
}

// exp_flush for x <= 0 (a logit less the running maximum): no upper clamp.
template <class V> static inline V exp_flush_nonpositive(V x) {
  typedef Element<V> T;
  return x < Limits<T>::exp_floor ? V{} : exp_in_range(vmax(x, splat(Limits<T>::exp_floor)));
}
static inline float exp_flush(float x) { return exp_flush(splat(x))[0]; }
static inline double exp_flush(double x) { return exp_flush(splat(x))[0]; }

// The logit dropout's keep test (ops/tra/dropout.py): scramble(row key ^ column key), read as int32, is at least
// p32 - 2^31 (which fits an int32). On one uint32 and, lane for lane, on a vector of them.
template <class U> static inline U scramble(U x) {
  x ^= x >> 16;
  x *= 0x21F0AAADu;
  x ^= x >> 15;
  x *= 0x735A2D97u;
  return x;
}
static inline bool dropout_keeps(uint32_t x, int64_t p32) {
  return static_cast<int32_t>(scramble(x)) >= static_cast<int32_t>(p32 - 2147483648LL);
}
typedef uint32_t HashVec __attribute__((vector_size(VECTOR_BYTES)));
static inline Vec<int32_t> dropout_keeps(HashVec x, int64_t p32) {
  return (Vec<int32_t>)scramble(x) >= static_cast<int32_t>(p32 - 2147483648LL);
}

// Lane i of the result: the sum of the lanes of a[i], for lanes<T>() vectors a. A transposing tree: at each
// level, vectors are paired and each output lane adds two lanes of one of them, about three instructions per
// vector where a horizontal sum each takes a dozen.
template <class T, int S> static inline Vec<T> pair_sums(Vec<T> u, Vec<T> w) {
  constexpr int L = lanes<T>();
  Mask<T> lo{}, hi{};
  for (int p = 0; p < L; ++p) {
    const bool first = p % (2 * S) < S;
    lo[p] = first ? p : L + p - S;
    hi[p] = first ? p + S : L + p;
  }
  return __builtin_shuffle(u, w, lo) + __builtin_shuffle(u, w, hi);
}
template <class T, int S = 1> static inline Vec<T> lane_sums(Vec<T>* a) {
  constexpr int L = lanes<T>();
  if constexpr (S >= L) {
    return a[0];
  } else {
    for (int x = 0; x < L / (2 * S); ++x) a[x] = pair_sums<T, S>(a[2 * x], a[2 * x + 1]);
    return lane_sums<T, 2 * S>(a);
  }
}

}  // namespace tra
