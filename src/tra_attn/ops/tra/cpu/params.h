// A call's arguments, as fused_cpu.Params lays them out (ctypes, field for field), and per-thread buffers.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace tra {

// Where the rows of a (B, H, S, D) tensor are: element strides of its batch, head and sequence dimensions, each
// row's D elements contiguous (a projection's output split into heads, (B, S, H, D) in memory, as much as a
// contiguous tensor or a slice of a KV cache).
struct Rows {
  int64_t b, h, s;
  template <class T> T* at(T* base, int64_t n, int64_t heads, int64_t row) const {
    return base + (n / heads) * b + (n % heads) * h + row * s;
  }
};

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
  Rows q_rows, k_rows, v_rows, o_rows;     // the inputs and the output
  Rows do_rows, dq_rows, dk_rows, dv_rows;  // the output's gradient and the inputs' (backward)
  int64_t checked;              // decoding applies the non-finite contract itself (decode_row)
  int64_t* tiles;               // null, or where the tiled forward and backward add the tiles they computed
  double norm_eps;              // > 0: q and k are RMS-normalised per row, x rsqrt(mean(x^2) + eps), in the kernels
};

// A zeroed, 64-byte aligned array of ``count`` T.
template <class T> struct Buffer {
  T* data = nullptr;
  explicit Buffer(size_t count) {
    const size_t bytes = ((count * sizeof(T) + 63) / 64) * 64;
    data = static_cast<T*>(std::aligned_alloc(64, bytes));
    std::memset(data, 0, bytes);
  }
  ~Buffer() { std::free(data); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
};

}  // namespace tra
