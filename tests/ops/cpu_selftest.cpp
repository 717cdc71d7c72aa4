// The fused CPU kernels against a materialised reference, without Python: forward, backward and a decoding row,
// in fp64 and fp32, for a build of any target (compiled with the kernels' flags; for aarch64 with Debian's cross
// compiler and run under qemu-user: tests/ops/test_cpu_build.py). Prints the largest errors; exit 0 iff within
// tolerance.
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "../../src/tra_attn/ops/tra/cpu/tra_cpu.cpp"

namespace {

struct Case {
  int64_t n, s, d, local;
  double threshold;
};

// The reference in double: out, and with dout the gradients, of one call (queries at every key position).
void reference(const Case& c, const std::vector<double>& q, const std::vector<double>& k, const std::vector<double>& v,
               const std::vector<double>& g, const std::vector<double>& dout, std::vector<double>& out,
               std::vector<double>& dq, std::vector<double>& dk, std::vector<double>& dv, std::vector<double>& dg) {
  const int64_t S = c.s, D = c.d;
  const double scale = 1.0 / std::sqrt(double(D));
  out.assign(c.n * S * D, 0), dq.assign(c.n * S * D, 0), dk.assign(c.n * S * D, 0), dv.assign(c.n * S * D, 0);
  dg.assign(c.n * S, 0);
  std::vector<double> s(S), logit(S), p(S), count(S);
  std::vector<char> kept(S);
  for (int64_t n = 0; n < c.n; ++n)
    for (int64_t i = 0; i < S; ++i) {
      const double* qi = &q[(n * S + i) * D];
      double top = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        s[j] = 0;
        for (int64_t e = 0; e < D; ++e) s[j] += qi[e] * k[(n * S + j) * D + e];
        s[j] *= scale;
        kept[j] = s[j] > c.threshold || i - j < c.local;
      }
      double running = 0;
      for (int64_t j = i; j >= 0; --j) {
        running += kept[j];
        count[j] = running;
        logit[j] = kept[j] ? s[j] + g[n * S + i] * running : -INFINITY;
        top = std::max(top, logit[j]);
      }
      double norm = 0;
      for (int64_t j = 0; j <= i; ++j) norm += p[j] = kept[j] ? std::exp(logit[j] - top) : 0;
      double* o = &out[(n * S + i) * D];
      for (int64_t j = 0; j <= i; ++j) {
        p[j] = norm > 0 ? p[j] / norm : 0;
        for (int64_t e = 0; e < D; ++e) o[e] += p[j] * v[(n * S + j) * D + e];
      }
      const double* go = &dout[(n * S + i) * D];
      double delta = 0;
      for (int64_t e = 0; e < D; ++e) delta += go[e] * o[e];
      for (int64_t j = 0; j <= i; ++j) {
        if (p[j] == 0) continue;
        double dp = 0;
        for (int64_t e = 0; e < D; ++e) dp += go[e] * v[(n * S + j) * D + e];
        const double dz = p[j] * (dp - delta);
        dg[n * S + i] += dz * count[j];
        for (int64_t e = 0; e < D; ++e) {
          dq[(n * S + i) * D + e] += scale * dz * k[(n * S + j) * D + e];
          dk[(n * S + j) * D + e] += scale * dz * qi[e];
          dv[(n * S + j) * D + e] += p[j] * go[e];
        }
      }
    }
}

template <class T> double worst(const std::vector<T>& a, const std::vector<double>& b, size_t count, size_t from = 0) {
  double err = 0, size = 1e-30;
  for (size_t x = 0; x < count; ++x) size = std::max(size, std::fabs(b[from + x]));
  for (size_t x = 0; x < count; ++x) err = std::max(err, std::fabs(double(a[x]) - b[from + x]));
  return err / size;
}

template <class T>
bool check(const Case& c, const char* dtype, double tolerance, int (*forward)(const Params*, const T*, const T*, const T*,
           const T*, T*, T*, T*, T*, T*), int (*backward)(const Params*, const T*, const T*, const T*, const T*,
           const T*, const T*, const T*, const T*, const T*, const T*, T*, T*, T*, T*)) {
  std::mt19937 gen(static_cast<unsigned>(c.n * 131 + c.s));
  std::normal_distribution<double> normal;
  const int64_t S = c.s, D = c.d, rows = c.n * S;
  std::vector<double> q(rows * D), k(rows * D), v(rows * D), g(rows), dout(rows * D);
  for (auto* x : {&q, &k}) {
    for (int64_t r = 0; r < rows; ++r) {  // RMS-normalised rows, as the TRA layer feeds the op
      double sq = 0;
      for (int64_t e = 0; e < D; ++e) sq += std::pow((*x)[r * D + e] = normal(gen), 2);
      for (int64_t e = 0; e < D; ++e) (*x)[r * D + e] /= std::sqrt(sq / D);
    }
  }
  for (auto& x : v) x = normal(gen);
  for (auto& x : dout) x = normal(gen);
  for (int64_t r = 0; r < rows; ++r) {  // head 0 forgets fast (its walks end early), the others slowly
    const double pre = normal(gen) + (r / S == 0 ? -40.0 : -1.0);
    g[r] = -std::log1p(std::exp(-pre));
  }
  std::vector<double> out, dq, dk, dv, dg;
  reference(c, q, k, v, g, dout, out, dq, dk, dv, dg);
  std::vector<T> tq(q.begin(), q.end()), tk(k.begin(), k.end()), tv(v.begin(), v.end()), tg(g.begin(), g.end()),
      tdo(dout.begin(), dout.end()), to(rows * D), lse(rows), mx(rows), gq(rows * D), gk(rows * D), gv(rows * D),
      gg(rows);
  Params p{};
  p.n = c.n, p.heads = c.n, p.sq = S, p.sk = S, p.d = D, p.scale = 1.0 / std::sqrt(double(D));
  p.threshold = c.threshold, p.local_window = c.local, p.drop_scale = 1, p.threads = 2;
  const tra::Rows contiguous{c.n * S * D, S * D, D};  // (1, N, S, D)
  p.q_rows = p.k_rows = p.v_rows = p.o_rows = p.do_rows = p.dq_rows = p.dk_rows = p.dv_rows = contiguous;
  forward(&p, tq.data(), tk.data(), tv.data(), tg.data(), to.data(), lse.data(), mx.data(), nullptr, nullptr);
  backward(&p, tq.data(), tk.data(), tv.data(), tg.data(), to.data(), lse.data(), mx.data(), nullptr, nullptr,
           tdo.data(), gq.data(), gk.data(), gv.data(), gg.data());
  // A decoding row: the last query alone against every key.
  Params row = p;
  row.sq = 1;
  row.q_rows = row.o_rows = tra::Rows{c.n * D, D, D};  // (1, N, 1, D)
  std::vector<T> last(c.n * D), last_gate(c.n), last_out(c.n * D), last_lse(c.n), last_mx(c.n);
  for (int64_t n = 0; n < c.n; ++n) {
    last_gate[n] = tg[n * S + S - 1];
    for (int64_t e = 0; e < D; ++e) last[n * D + e] = tq[(n * S + S - 1) * D + e];
  }
  forward(&row, last.data(), tk.data(), tv.data(), last_gate.data(), last_out.data(), last_lse.data(), last_mx.data(),
          nullptr, nullptr);
  double decode = 0;
  for (int64_t n = 0; n < c.n; ++n)
    decode = std::max(decode, worst(std::vector<T>(last_out.begin() + n * D, last_out.begin() + (n + 1) * D), out, D,
                                    (n * S + S - 1) * D));
  const double errors[] = {worst(to, out, out.size()), worst(gq, dq, dq.size()), worst(gk, dk, dk.size()),
                           worst(gv, dv, dv.size()), worst(gg, dg, dg.size()), decode};
  bool ok = true;
  for (double e : errors) ok = ok && e <= tolerance;
  std::printf("%s %s N=%ld S=%ld D=%ld: out %.1e dq %.1e dk %.1e dv %.1e dgate %.1e decode %.1e %s\n", tra::TARGET,
              dtype, long(c.n), long(S), long(D), errors[0], errors[1], errors[2], errors[3], errors[4], errors[5],
              ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main() {
  bool ok = true;
  for (const Case& c : {Case{3, 150, 21, 2, 0.0}, Case{2, 200, 64, 0, 0.1}, Case{2, 97, 8, 0, -INFINITY}}) {
    ok = check<double>(c, "fp64", 1e-9, tra_forward_f64, tra_backward_f64) && ok;
    ok = check<float>(c, "fp32", 2e-4, tra_forward_f32, tra_backward_f32) && ok;
  }
  return ok ? 0 : 1;
}
