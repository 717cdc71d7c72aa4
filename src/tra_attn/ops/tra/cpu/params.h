// A call's arguments, as fused_cpu.Params lays them out (ctypes, field for field), and per-thread buffers.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace tra {

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
  int64_t* tiles;              // null, or where the tiled forward and backward add the tiles they computed
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
