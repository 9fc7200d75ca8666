// Plain bidirectional attention on CPU as an XLA FFI custom call: out = softmax(scale q.k) v
// and the rows' log-sum-exp, float32, for posjax/attention/native.py (which builds this file
// with the machine's C++ compiler and owns the backward pass). The same library holds two ops
// of the model's other layers: the weight gradients' transpose and the layer norm.
//
// q [B, Lq, H, D], k and v [B, Lk, H, D] (the model's layout, read in place: no transposes);
// out [B, Lq, H, D], lse [B, Lq, H]. A thread takes one (pair, query block) at a time and
// runs flash attention's online softmax over key blocks, so a step's logits (block_q x block_k)
// stay in cache at any length. Each thread packs a pair's keys once into panels of KP keys x D
// (the q.k micro-kernel then reads contiguous vectors instead of keys a row apart); the two
// products are register-blocked loops the compiler vectorizes for this CPU (-march=native).

#include <algorithm>
#include <climits>
#include <atomic>
#include <cfloat>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#if defined(__AVX2__)
#include <immintrin.h>
#endif

#include "xla/ffi/api/ffi.h"

namespace ffi = xla::ffi;

namespace {

constexpr int KP = 32;  // keys per packed panel: two 16-float vectors per query row

// exp(x) for x <= 0 (a logit minus its row's running max): reduction to r in [-ln2/2, ln2/2],
// a degree-6 polynomial (relative error ~1e-7, float32's own), 2^n put into the exponent.
// Inline arithmetic, so the softmax loops vectorize without a libm call per element.
inline float exp_nonpositive(float x) {
  x = x < -87.0f ? -87.0f : x;  // exp(-87) ~ 1.6e-38: below float32's normal range beyond
  // x <= 0, so truncating y - 0.5 toward zero rounds y = x / ln2 to the nearest integer.
  const int32_t n = static_cast<int32_t>(x * 1.44269504088896341f - 0.5f);
  const float nf = static_cast<float>(n);
  float r = x - nf * 0.693145751953125f;  // ln2 in two parts (Cody-Waite)
  r = r - nf * 1.428606765330187045e-06f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (n + 127) << 23;
  float two_n;
  std::memcpy(&two_n, &bits, sizeof two_n);
  return p * two_n;
}

// D = 0 in a template below: a head dim known only at run time (`dim`), the key dim of a
// factored term (q and k wider than v: [q | q_extra] . [k | k_extra]); otherwise dim = D.

// keys [n, D] (row stride rs) -> panels [ceil(n / KP)][D][KP], the tail zero-padded.
template <int D>
void pack_keys(const float* keys, int64_t n, int64_t rs, float* panels, int dim = D) {
  const int dd = D > 0 ? D : dim;
  for (int64_t p = 0; p * KP < n; ++p)
    for (int d = 0; d < dd; ++d)
      for (int c = 0; c < KP; ++c) {
        const int64_t j = p * KP + c;
        panels[(p * dd + d) * KP + c] = j < n ? keys[j * rs + d] : 0.0f;
      }
}

// rows [n, dim] (row stride rs) -> out [n][dim], contiguous: the products then read a row of
// the second operand as whole vectors from consecutive lines. pv_tile read it in place, rows a
// layer's H * D floats apart, at ~0.8x the rate (head dim 64, Xeon with AMX).
inline void pack_rows(const float* rows, int64_t n, int64_t rs, int dim, float* out) {
  for (int64_t j = 0; j < n; ++j) std::memcpy(out + j * dim, rows + j * rs, dim * sizeof(float));
}

// logits[R rows][KP] = scale * q[R rows][D] . one panel
template <int D, int R>
inline void qk_tile(const float* q, int64_t rs, const float* panel, float scale,
                    float* logits, int64_t ld, int dim = D) {
  const int dd = D > 0 ? D : dim;
  float acc[R][KP] = {};
  for (int d = 0; d < dd; ++d) {
    const float* kd = panel + d * KP;
    for (int r = 0; r < R; ++r) {
      const float qv = q[r * rs + d];
#pragma omp simd
      for (int c = 0; c < KP; ++c) acc[r][c] += qv * kd[c];
    }
  }
  for (int r = 0; r < R; ++r)
#pragma omp simd
    for (int c = 0; c < KP; ++c) logits[r * ld + c] = acc[r][c] * scale;
}

// logits[rows][ceil(n / KP) * KP] for keys [0, n) of the packed panels
template <int D>
void qk_block(const float* q, int64_t rs, const float* panels, int rows, int64_t n,
              float scale, float* logits, int64_t ld, int dim = D) {
  const int dd = D > 0 ? D : dim;
  for (int64_t p = 0; p * KP < n; ++p) {
    const float* panel = panels + p * dd * KP;
    int i = 0;
    for (; i + 8 <= rows; i += 8)
      qk_tile<D, 8>(q + i * rs, rs, panel, scale, logits + i * ld + p * KP, ld, dd);
    for (; i < rows; ++i)
      qk_tile<D, 1>(q + i * rs, rs, panel, scale, logits + i * ld + p * KP, ld, dd);
  }
}

// out[R rows][D] += probs[R rows][n] . v[n][D], v's rows vs apart and out's os apart; T: probs
// is stored transposed, [n][ld] (the backward's dS for dQ, read in place instead of transposed
// into a copy per tile)
template <int D, int R, bool T = false>
inline void pv_tile(const float* probs, int64_t ld, const float* v, int64_t vs, int64_t n,
                    float* out, int64_t os) {
  float acc[R][D];
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < D; ++c) acc[r][c] = out[r * os + c];
  for (int64_t j = 0; j < n; ++j) {
    const float* vj = v + j * vs;
    for (int r = 0; r < R; ++r) {
      const float pv = T ? probs[j * ld + r] : probs[r * ld + j];
#pragma omp simd
      for (int c = 0; c < D; ++c) acc[r][c] += pv * vj[c];
    }
  }
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < D; ++c) out[r * os + c] = acc[r][c];
}

template <int D, bool T = false>
void pv_block(const float* probs, int64_t ld, const float* v, int64_t vs, int rows, int64_t n,
              float* out, int64_t os) {
  // R x D / 16 = 24 vector accumulators; at D = 8 a row is half a vector, its accumulator a
  // whole 8-wide one, and 48 rows spilled: 16 rows ran the forward and backward in 0.66x the
  // time of 48 (B 128, L 80, H 8, one core; 24 rows: 0.97x, 8: 0.71x)
  constexpr int R = D >= 128 ? 3 : D == 8 ? 16 : 384 / D;
  const int64_t step = T ? 1 : ld;  // from one output row's probs to the next's
  int i = 0;
  for (; i + R <= rows; i += R)
    pv_tile<D, R, T>(probs + i * step, ld, v, vs, n, out + i * os, os);
  for (; i + 2 <= rows; i += 2)
    pv_tile<D, 2, T>(probs + i * step, ld, v, vs, n, out + i * os, os);
  for (; i < rows; ++i) pv_tile<D, 1, T>(probs + i * step, ld, v, vs, n, out + i * os, os);
}

// pv_block for D = 0 (a run-time width `dim`, a multiple of 8): the output's columns in
// chunks of a compiled width (64, 32, 16, 8), each chunk a pv_block at a column offset of v
// and out; the same sums per column as one pv_block of width dim.
template <int D, bool T = false>
void pv_cols(const float* probs, int64_t ld, const float* v, int64_t vs, int rows, int64_t n,
             float* out, int64_t os, int dim = D) {
  if constexpr (D > 0) {
    pv_block<D, T>(probs, ld, v, vs, rows, n, out, os);
  } else {
    int c = 0;
    for (; c + 64 <= dim; c += 64) pv_block<64, T>(probs, ld, v + c, vs, rows, n, out + c, os);
    for (; c + 32 <= dim; c += 32) pv_block<32, T>(probs, ld, v + c, vs, rows, n, out + c, os);
    for (; c + 16 <= dim; c += 16) pv_block<16, T>(probs, ld, v + c, vs, rows, n, out + c, os);
    for (; c + 8 <= dim; c += 8) pv_block<8, T>(probs, ld, v + c, vs, rows, n, out + c, os);
  }
}

// A factored term's extra columns, in arrays of their own (no concatenation in XLA): q_extra
// [B, Lq, H, F] and k_extra [B, Lk, k_heads, F] (k_heads 1: shared by every head); q and k
// then hold their first DK - F columns. The kernel gathers a pair's rows of both into one
// contiguous row of DK (keys: straight into the packed panels), runs as with q and k of
// width DK, and scatters dQ and dK back to both (dk_extra per head: [B, Lk, H, F]).
struct Extra {
  const float* q;
  const float* k;
  int64_t f;
  int64_t k_heads;
  float* dq;  // backward only
  float* dk;  // nullptr: k_extra takes no gradient (a constant, as XL's key side)
};

// out[j][0, da + db) = a[j * ra + 0, da) ++ b[j * rb + 0, db), j < n
inline void gather_two(const float* a, int64_t ra, int64_t da, const float* b, int64_t rb,
                       int64_t db, int64_t n, float* out) {
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(out + j * (da + db), a + j * ra, da * sizeof(float));
    std::memcpy(out + j * (da + db) + da, b + j * rb, db * sizeof(float));
  }
}

// the inverse of gather_two; b = nullptr: the columns [da, da + db) are dropped
inline void scatter_two(const float* in, int64_t n, float* a, int64_t ra, int64_t da, float* b,
                        int64_t rb, int64_t db) {
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(a + j * ra, in + j * (da + db), da * sizeof(float));
    if (b != nullptr) std::memcpy(b + j * rb, in + j * (da + db) + da, db * sizeof(float));
  }
}

// pack_keys of keys whose columns [0, da) are a's rows and [da, da + db) b's
inline void pack_two(const float* a, int64_t ra, int64_t da, const float* b, int64_t rb,
                     int64_t db, int64_t n, float* panels) {
  const int64_t w = da + db;
  for (int64_t p = 0; p * KP < n; ++p) {
    for (int64_t d = 0; d < da; ++d)
      for (int c = 0; c < KP; ++c) {
        const int64_t j = p * KP + c;
        panels[(p * w + d) * KP + c] = j < n ? a[j * ra + d] : 0.0f;
      }
    for (int64_t d = 0; d < db; ++d)
      for (int c = 0; c < KP; ++c) {
        const int64_t j = p * KP + c;
        panels[(p * w + da + d) * KP + c] = j < n ? b[j * rb + d] : 0.0f;
      }
  }
}

// Which (query, key) pairs may attend: a local layer's window by positions (|q_pos - k_pos|
// <= half, tiles.window_mask; half < 0: no window), real keys (k_ok != 0) and equal segment
// ids, each optional. A tile none of whose pairs may attend is skipped, one all of whose may
// runs unmasked, and only the others build a mask: so with positions in array order a local
// layer costs O(L x window), and padding or other packed examples cost nothing.
struct Pairs {
  const int32_t* q_pos;  // [B, Lq]
  const int32_t* k_pos;  // [B, Lk]
  int64_t half;
  const int32_t* k_ok;   // [B, Lk] or null
  const int32_t* q_seg;  // [B, Lq] or null (then k_seg too)
  const int32_t* k_seg;  // [B, Lk]
  enum Kind { kNone, kFull, kPartial };

  bool masked() const { return half >= 0 || k_ok != nullptr || q_seg != nullptr; }
  static void range(const int32_t* x, int64_t n, int64_t& lo, int64_t& hi) {
    lo = INT64_MAX, hi = INT64_MIN;
    for (int64_t i = 0; i < n; ++i) {
      lo = std::min<int64_t>(lo, x[i]);
      hi = std::max<int64_t>(hi, x[i]);
    }
  }
  // queries [q0, q0 + nq) against keys [k0, k0 + nk) of batch row b
  Kind tile(int64_t b, int64_t len_q, int64_t len_k, int64_t q0, int64_t nq, int64_t k0,
            int64_t nk) const {
    bool full = true;
    int64_t qlo, qhi, klo, khi;
    if (half >= 0) {
      range(q_pos + b * len_q + q0, nq, qlo, qhi);
      range(k_pos + b * len_k + k0, nk, klo, khi);
      if (khi < qlo - half || klo > qhi + half) return kNone;
      full = std::max(qhi - klo, khi - qlo) <= half;
    }
    if (k_ok != nullptr) {
      range(k_ok + b * len_k + k0, nk, klo, khi);
      if (khi == 0) return kNone;
      full = full && klo != 0;
    }
    if (q_seg != nullptr) {
      range(q_seg + b * len_q + q0, nq, qlo, qhi);
      range(k_seg + b * len_k + k0, nk, klo, khi);
      if (qhi < klo || khi < qlo) return kNone;
      full = full && qlo == qhi && klo == khi && qlo == klo;
    }
    return full ? kFull : kPartial;
  }
  // Whether the pairs that may attend in this tile are exactly its queries [r0, r1) x its keys
  // [0, p): real keys first, then padding, all of one segment (a padded batch's usual edge
  // tile). Then the caller runs that rectangle as a full tile and leaves the other queries
  // alone, instead of building and applying a mask. No window: its pairs are a band.
  bool rectangle(int64_t b, int64_t len_q, int64_t len_k, int64_t q0, int64_t nq, int64_t k0,
                 int64_t nk, int64_t& r0, int64_t& r1, int64_t& p) const {
    if (half >= 0) return false;
    p = nk;
    if (k_ok != nullptr) {
      const int32_t* ok = k_ok + b * len_k + k0;
      p = 0;
      while (p < nk && ok[p] != 0) ++p;
      for (int64_t j = p; j < nk; ++j)
        if (ok[j] != 0) return false;
    }
    if (p == 0) return false;
    r0 = 0, r1 = nq;
    if (q_seg == nullptr) return true;
    const int32_t* ks = k_seg + b * len_k + k0;
    const int32_t* qs = q_seg + b * len_q + q0;
    for (int64_t j = 1; j < p; ++j)
      if (ks[j] != ks[0]) return false;
    while (r0 < nq && qs[r0] != ks[0]) ++r0;
    r1 = r0;
    while (r1 < nq && qs[r1] == ks[0]) ++r1;
    for (int64_t i = r1; i < nq; ++i)
      if (qs[i] == ks[0]) return false;
    return r1 > r0;
  }
  // mask[i * ld + j] = 1 where query q0 + i may attend key k0 + j, else 0. One vectorized
  // pass per condition present: a padded small-head model builds a mask for most of its tiles,
  // and a per-pair test of every condition cost as much as the attention itself there.
  void mask(int64_t b, int64_t len_q, int64_t len_k, int64_t q0, int nq, int64_t k0, int nk,
            float* out, int64_t ld) const {
    const int64_t qa = b * len_q + q0, ka = b * len_k + k0;
    for (int i = 0; i < nq; ++i) {
      float* row = out + i * ld;
      if (k_ok != nullptr) {
        const int32_t* ok = k_ok + ka;
#pragma omp simd
        for (int j = 0; j < nk; ++j) row[j] = ok[j] != 0 ? 1.0f : 0.0f;
      } else {
        std::fill(row, row + nk, 1.0f);
      }
      if (q_seg != nullptr) {
        const int32_t qs = q_seg[qa + i];
        const int32_t* ks = k_seg + ka;
#pragma omp simd
        for (int j = 0; j < nk; ++j) row[j] = ks[j] == qs ? row[j] : 0.0f;
      }
      if (half >= 0) {
        const int64_t qp = q_pos[qa + i];
        const int32_t* kp = k_pos + ka;
#pragma omp simd
        for (int j = 0; j < nk; ++j) {
          const int64_t d = qp - kp[j];
          row[j] = (d <= half && -d <= half) ? row[j] : 0.0f;
        }
      }
    }
  }
};

// Runs work(next) on this thread and on helpers scheduled on XLA's own intra-op pool (its
// threads, not more: XLA's would wait for cores otherwise); work claims task numbers from the
// shared counter `next` until they pass `tasks`. This thread does whatever the helpers have not
// claimed, then waits only for the helpers that STARTED: a helper the pool has not run yet
// finds the call closed and returns without touching a buffer. (Waiting for every scheduled
// helper deadlocked several devices of one process, e.g. a mesh of simulated CPU devices: each
// kernel held a pool thread while its helpers queued behind the others' kernels.)
template <typename Work>
void parallel(ffi::ThreadPool& pool, int64_t tasks, Work work) {
  struct Shared {
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::condition_variable cv;
    int active = 0;
    bool closed = false;
  };
  auto shared = std::make_shared<Shared>();
  const int helpers = static_cast<int>(std::min<int64_t>(pool.num_threads(), tasks) - 1);
  for (int i = 0; i < helpers; ++i)
    pool.Schedule([shared, work]() {
      {
        std::lock_guard<std::mutex> lock(shared->mu);
        if (shared->closed) return;
        ++shared->active;
      }
      work(shared->next);
      std::lock_guard<std::mutex> lock(shared->mu);
      --shared->active;
      shared->cv.notify_one();
    });
  work(shared->next);
  std::unique_lock<std::mutex> lock(shared->mu);
  shared->closed = true;
  shared->cv.wait(lock, [&] { return shared->active == 0; });
}

// Task claims by whole batch rows: the tasks of one batch element (all its heads, [B, L, H, D]
// with the heads adjacent in a row) go to one thread in order, so that two threads never
// write the same output rows. Claimed pair by pair, the threads wrote the same cache lines
// whenever a head's D floats were less than a line (D 8: two heads a line) and took turns
// owning each line (at 8 heads of 8 and 80 tokens two threads ran 1.3-1.4x one). With fewer
// than kRowClaims batch rows the claims are single tasks, to keep every thread busy.
constexpr int64_t kRowClaims = 4;

struct Claims {
  std::atomic<int64_t>& next;  // counts chunks of `chunk` tasks
  int64_t tasks, chunk, at = 0, end = 0;
  bool get(int64_t& t) {
    if (at == end) {
      at = next.fetch_add(1) * chunk;
      if (at >= tasks) return false;
      end = std::min(at + chunk, tasks);
    }
    t = at++;
    return true;
  }
};

// The tasks a claim takes: `per_row` (a batch row's tasks) for kRowClaims rows or more.
inline int64_t claim_chunk(int64_t batch, int64_t per_row) {
  return batch >= kRowClaims ? per_row : 1;
}

inline int64_t chunks(int64_t tasks, int64_t chunk) { return (tasks + chunk - 1) / chunk; }

template <int D>
void attend(const float* q, const float* k, const float* v, Pairs window, int64_t batch,
            int64_t heads, int64_t len_q, int64_t len_k, float scale, int64_t block_q,
            int64_t block_k, float* out, float* lse, ffi::ThreadPool& pool) {
  const int64_t pairs = batch * heads, rs = heads * D;  // [B, L, H, D]: rows H * D apart
  const int64_t padded_k = (len_k + KP - 1) / KP * KP;
  const int64_t bk = std::min((block_k + KP - 1) / KP * KP, padded_k);
  const int64_t q_blocks = (len_q + block_q - 1) / block_q, tasks = pairs * q_blocks;
  const int64_t chunk = claim_chunk(batch, heads * q_blocks);
  parallel(pool, chunks(tasks, chunk), [=](std::atomic<int64_t>& next) {
    std::vector<float> logits(block_q * bk), panels(padded_k * D), m(block_q), total(block_q),
        valid(window.masked() ? block_q * bk : 0);
    int64_t packed = -1;
    Claims claims{next, tasks, chunk};
    for (int64_t t; claims.get(t);) {
      const int64_t pair = t / q_blocks, q0 = (t % q_blocks) * block_q;
      const int rows = static_cast<int>(std::min(block_q, len_q - q0));
      const int64_t b = pair / heads, h = pair % heads;
      if (pair != packed) {  // tasks go pair by pair: each thread packs a pair's keys once
        pack_keys<D>(k + b * len_k * rs + h * D, len_k, rs, panels.data());
        packed = pair;
      }
      const float* qb = q + (b * len_q + q0) * rs + h * D;
      const float* vp = v + b * len_k * rs + h * D;
      float* ob = out + (b * len_q + q0) * rs + h * D;
      for (int i = 0; i < rows; ++i) std::fill(ob + i * rs, ob + i * rs + D, 0.0f);
      std::fill(m.begin(), m.end(), -FLT_MAX);
      std::fill(total.begin(), total.end(), 0.0f);
      for (int64_t k0 = 0; k0 < len_k; k0 += bk) {
        int64_t n = std::min(bk, len_k - k0);
        auto kind = window.tile(b, len_q, len_k, q0, rows, k0, n);
        if (kind == Pairs::kNone) continue;
        // The tile's queries [r0, r0 + nr) against its keys [0, n): all of them, or the
        // rectangle that a padded tile reduces to (Pairs::rectangle).
        int64_t r0 = 0, r1 = rows, p = n;
        if (kind == Pairs::kPartial &&
            window.rectangle(b, len_q, len_k, q0, rows, k0, n, r0, r1, p)) {
          kind = Pairs::kFull;
          n = p;
        } else {
          r0 = 0, r1 = rows;
        }
        const int nr = static_cast<int>(r1 - r0);
        float *mr = m.data() + r0, *tr = total.data() + r0, *orow = ob + r0 * rs;
        qk_block<D>(qb + r0 * rs, rs, panels.data() + k0 * D, nr, n, scale, logits.data(), bk);
        if (kind == Pairs::kPartial)
          window.mask(b, len_q, len_k, q0, rows, k0, static_cast<int>(n), valid.data(), bk);
        for (int i = 0; i < nr; ++i) {
          float* row = logits.data() + i * bk;
          float mx = mr[i];
          float sum = 0.0f;
          if (kind == Pairs::kFull) {
#pragma omp simd reduction(max : mx)
            for (int64_t j = 0; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < n; ++j) {
              const float e = exp_nonpositive(row[j] - mx);
              row[j] = e;
              sum += e;
            }
          } else {  // a mask's edge: masked pairs weigh exactly 0
            const float* ok = valid.data() + i * bk;
#pragma omp simd reduction(max : mx)
            for (int64_t j = 0; j < n; ++j) mx = ok[j] > 0.0f && row[j] > mx ? row[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < n; ++j) {
              // a select, not a product: a row with no key yet has mx = -FLT_MAX
              const float e = ok[j] > 0.0f ? exp_nonpositive(row[j] - mx) : 0.0f;
              row[j] = e;
              sum += e;
            }
          }
          if (mx > mr[i] && k0 > 0) {  // the running max rose: rescale what came before
            const float alpha = exp_nonpositive(mr[i] - mx);
            tr[i] *= alpha;
#pragma omp simd
            for (int c = 0; c < D; ++c) orow[i * rs + c] *= alpha;
          }
          tr[i] += sum;
          mr[i] = mx;
        }
        pv_block<D>(logits.data(), bk, vp + k0 * rs, rs, nr, n, orow, rs);
      }
      for (int i = 0; i < rows; ++i) {
        // A query with no key to attend (all masked): output 0, and lse +inf
        // so that the backward gives it no probability.
        lse[(b * len_q + q0 + i) * heads + h] =
            total[i] > 0.0f ? m[i] + std::log(total[i]) : INFINITY;
        const float inv = total[i] > 0.0f ? 1.0f / total[i] : 0.0f;
#pragma omp simd
        for (int c = 0; c < D; ++c) ob[i * rs + c] *= inv;
      }
    }
  });
}

// `attend` with q and k [B, L, H, DK], v and out [B, L, H, D]: DK = 0, the run-time key dim
// `dim_k` of a factored term (DK = D: `attend` itself), whose last F columns may come from
// `ex`. The same steps; the plain head dims keep `attend` as it was.
template <int DK, int D>
void attend_wide(const float* q, const float* k, const float* v, Pairs window, int64_t batch,
                 int64_t heads, int64_t len_q, int64_t len_k, int dim_k, float scale,
                 int64_t block_q, int64_t block_k, float* out, float* lse,
                 ffi::ThreadPool& pool, const Extra* ex = nullptr) {
  const int64_t pairs = batch * heads, rs = heads * D;  // [B, L, H, D]: rows H * D apart
  const int64_t dk = DK > 0 ? DK : dim_k;
  const int64_t f = ex != nullptr ? ex->f : 0, dm = dk - f;  // columns of q and k themselves
  const int64_t rk = heads * dm;  // q and k: rows H * DK apart (H * (DK - F) with ex)
  const int64_t padded_k = (len_k + KP - 1) / KP * KP;
  const int64_t bk = std::min((block_k + KP - 1) / KP * KP, padded_k);
  const int64_t q_blocks = (len_q + block_q - 1) / block_q, tasks = pairs * q_blocks;
  const int64_t chunk = claim_chunk(batch, heads * q_blocks);
  parallel(pool, chunks(tasks, chunk), [=](std::atomic<int64_t>& next) {
    std::vector<float> logits(block_q * bk), panels(padded_k * dk), m(block_q),
        total(block_q), valid(window.masked() ? block_q * bk : 0),
        q_rows(ex != nullptr ? block_q * dk : 0);
    int64_t packed = -1;
    Claims claims{next, tasks, chunk};
    for (int64_t t; claims.get(t);) {
      const int64_t pair = t / q_blocks, q0 = (t % q_blocks) * block_q;
      const int rows = static_cast<int>(std::min(block_q, len_q - q0));
      const int64_t b = pair / heads, h = pair % heads;
      if (pair != packed) {  // tasks go pair by pair: each thread packs a pair's keys once
        if (ex != nullptr) {
          const int64_t rke = ex->k_heads * f, hk = ex->k_heads > 1 ? h : 0;
          pack_two(k + b * len_k * rk + h * dm, rk, dm, ex->k + b * len_k * rke + hk * f, rke,
                   f, len_k, panels.data());
        } else {
          pack_keys<DK>(k + b * len_k * rk + h * dk, len_k, rk, panels.data(), dk);
        }
        packed = pair;
      }
      const float* qb = q + (b * len_q + q0) * rk + h * dm;
      int64_t rq = rk;  // qb's row stride
      if (ex != nullptr) {  // the block's rows of [q | q_extra], contiguous
        gather_two(qb, rk, dm, ex->q + (b * len_q + q0) * heads * f + h * f, heads * f, f, rows,
                   q_rows.data());
        qb = q_rows.data();
        rq = dk;
      }
      const float* vp = v + b * len_k * rs + h * D;
      float* ob = out + (b * len_q + q0) * rs + h * D;
      for (int i = 0; i < rows; ++i) std::fill(ob + i * rs, ob + i * rs + D, 0.0f);
      std::fill(m.begin(), m.end(), -FLT_MAX);
      std::fill(total.begin(), total.end(), 0.0f);
      for (int64_t k0 = 0; k0 < len_k; k0 += bk) {
        int64_t n = std::min(bk, len_k - k0);
        auto kind = window.tile(b, len_q, len_k, q0, rows, k0, n);
        if (kind == Pairs::kNone) continue;
        // The tile's queries [r0, r0 + nr) against its keys [0, n): all of them, or the
        // rectangle that a padded tile reduces to (Pairs::rectangle).
        int64_t r0 = 0, r1 = rows, p = n;
        if (kind == Pairs::kPartial &&
            window.rectangle(b, len_q, len_k, q0, rows, k0, n, r0, r1, p)) {
          kind = Pairs::kFull;
          n = p;
        } else {
          r0 = 0, r1 = rows;
        }
        const int nr = static_cast<int>(r1 - r0);
        float *mr = m.data() + r0, *tr = total.data() + r0, *orow = ob + r0 * rs;
        qk_block<DK>(qb + r0 * rq, rq, panels.data() + k0 * dk, nr, n, scale, logits.data(), bk,
                     dk);
        if (kind == Pairs::kPartial)
          window.mask(b, len_q, len_k, q0, rows, k0, static_cast<int>(n), valid.data(), bk);
        for (int i = 0; i < nr; ++i) {
          float* row = logits.data() + i * bk;
          float mx = mr[i];
          float sum = 0.0f;
          if (kind == Pairs::kFull) {
#pragma omp simd reduction(max : mx)
            for (int64_t j = 0; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < n; ++j) {
              const float e = exp_nonpositive(row[j] - mx);
              row[j] = e;
              sum += e;
            }
          } else {  // a mask's edge: masked pairs weigh exactly 0
            const float* ok = valid.data() + i * bk;
#pragma omp simd reduction(max : mx)
            for (int64_t j = 0; j < n; ++j) mx = ok[j] > 0.0f && row[j] > mx ? row[j] : mx;
#pragma omp simd reduction(+ : sum)
            for (int64_t j = 0; j < n; ++j) {
              // a select, not a product: a row with no key yet has mx = -FLT_MAX
              const float e = ok[j] > 0.0f ? exp_nonpositive(row[j] - mx) : 0.0f;
              row[j] = e;
              sum += e;
            }
          }
          if (mx > mr[i] && k0 > 0) {  // the running max rose: rescale what came before
            const float alpha = exp_nonpositive(mr[i] - mx);
            tr[i] *= alpha;
#pragma omp simd
            for (int c = 0; c < D; ++c) orow[i * rs + c] *= alpha;
          }
          tr[i] += sum;
          mr[i] = mx;
        }
        pv_block<D>(logits.data(), bk, vp + k0 * rs, rs, nr, n, orow, rs);
      }
      for (int i = 0; i < rows; ++i) {
        // A query with no key to attend (all masked): output 0, and lse +inf
        // so that the backward gives it no probability.
        lse[(b * len_q + q0 + i) * heads + h] =
            total[i] > 0.0f ? m[i] + std::log(total[i]) : INFINITY;
        const float inv = total[i] > 0.0f ? 1.0f / total[i] : 0.0f;
#pragma omp simd
        for (int c = 0; c < D; ++c) ob[i * rs + c] *= inv;
      }
    }
  });
}

// Flash attention's backward from the forward's out and lse, for one (batch, head) pair per
// task: delta = rowsum(d_out * out) once per pair, then per key block of KB keys, over query
// blocks of QB queries,
//   P^T = exp(scale K Q^T - lse),  dV += P^T dO,  dP^T = V dO^T,
//   dS^T = scale P^T (dP^T - delta),  dK += dS^T Q,  dQ += dS K.
// The pair's task owns its dq, dk and dv rows, so nothing is shared between threads.
constexpr int64_t QB = 96, KB = 96;  // multiples of KP and of every pv_tile's R

// From this many queries or keys on, the backward reads a pair's rows of q, d_out and k from
// contiguous copies and sums its dQ, dK and dV in contiguous rows, written back once. In
// place, rows are a layer's H * D floats apart: at 2048 tokens and 6 heads of 64 a pair's dQ
// spans 3 MiB, past L2, and each key block's pass over it missed (backward at 2048 1.11x
// faster with the copies); short inputs fit in cache either way and the copies only cost
// (at 128 tokens, 0.92x).
constexpr int64_t kContiguousFrom = 512;

template <int D>
void attend_backward(const float* q, const float* k, const float* v, const float* d_out,
                     const float* out, const float* lse, Pairs window, int64_t batch,
                     int64_t heads,
                     int64_t len_q, int64_t len_k, float scale, float* dq, float* dk, float* dv,
                     ffi::ThreadPool& pool) {
  const int64_t pairs = batch * heads, rs = heads * D;
  const int64_t padded_q = (len_q + KP - 1) / KP * KP;
  const int64_t chunk = claim_chunk(batch, heads);
  const bool contiguous = std::max(len_q, len_k) >= kContiguousFrom;
  const int64_t nq_rows = contiguous ? len_q * D : 0, nk_rows = contiguous ? len_k * D : 0,
                nb_rows = contiguous ? KB * D : 0;
  parallel(pool, chunks(pairs, chunk), [=](std::atomic<int64_t>& next) {
    std::vector<float> q_panels(padded_q * D), do_panels(padded_q * D), pt(KB * QB),
        dst(KB * QB), valid(window.masked() ? QB * KB : 0), delta(len_q), q_rows(nq_rows),
        do_rows(nq_rows), k_rows(nk_rows), dq_rows(nq_rows), dk_rows(nb_rows),
        dv_rows(nb_rows);
    Claims claims{next, pairs, chunk};
    for (int64_t pair; claims.get(pair);) {
      const int64_t b = pair / heads, h = pair % heads;
      const int64_t q_at = b * len_q * rs + h * D, k_at = b * len_k * rs + h * D;
      const float *qp = q + q_at, *dop = d_out + q_at, *kp = k + k_at, *vp = v + k_at;
      const float *op = out + q_at, *lp = lse + b * len_q * heads + h;
      float *dqp = dq + q_at, *dkp = dk + k_at, *dvp = dv + k_at;
      for (int64_t i = 0; i < len_q; ++i) {
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < D; ++c) sum += dop[i * rs + c] * op[i * rs + c];
        delta[i] = sum;
      }
      pack_keys<D>(qp, len_q, rs, q_panels.data());
      pack_keys<D>(dop, len_q, rs, do_panels.data());
      // q, d_out and k's rows (`so` apart) and dQ's (`sg` apart): in place or contiguous
      const float *qr = qp, *dor = dop, *kr = kp;
      float* dqr = dqp;
      int64_t so = rs, sg = rs;
      if (contiguous) {
        pack_rows(qp, len_q, rs, D, q_rows.data());
        pack_rows(dop, len_q, rs, D, do_rows.data());
        pack_rows(kp, len_k, rs, D, k_rows.data());
        qr = q_rows.data(), dor = do_rows.data(), kr = k_rows.data(), dqr = dq_rows.data();
        so = sg = D;
      }
      for (int64_t i = 0; i < len_q; ++i) std::fill(dqr + i * sg, dqr + i * sg + D, 0.0f);
      for (int64_t k0 = 0; k0 < len_k; k0 += KB) {
        const int nk_block = static_cast<int>(std::min(KB, len_k - k0));
        float* dkr = contiguous ? dk_rows.data() : dkp + k0 * rs;  // the block's dK, dV rows
        float* dvr = contiguous ? dv_rows.data() : dvp + k0 * rs;
        for (int r = 0; r < nk_block; ++r) {
          std::fill(dkr + r * sg, dkr + r * sg + D, 0.0f);
          std::fill(dvr + r * sg, dvr + r * sg + D, 0.0f);
        }
        for (int64_t qb0 = 0; qb0 < len_q; qb0 += QB) {
          int nq = static_cast<int>(std::min(QB, len_q - qb0));
          auto kind = window.tile(b, len_q, len_k, qb0, nq, k0, nk_block);
          if (kind == Pairs::kNone) continue;
          // As in the forward, a padded tile's rectangle runs unmasked: its queries
          // [q0, q0 + nq) (q0 a panel boundary, as the packed queries are read from it)
          // against keys [k0, k0 + nk).
          int64_t q0 = qb0, nk = nk_block, r0 = 0, r1 = nq, p = nk_block;
          if (kind == Pairs::kPartial &&
              window.rectangle(b, len_q, len_k, qb0, nq, k0, nk_block, r0, r1, p) &&
              r0 % KP == 0) {
            kind = Pairs::kFull;
            q0 = qb0 + r0, nq = static_cast<int>(r1 - r0), nk = static_cast<int>(p);
          }
          float l[QB], dl[QB];
          for (int j = 0; j < nq; ++j) {
            l[j] = lp[(q0 + j) * heads];
            dl[j] = delta[q0 + j];
          }
          qk_block<D>(kr + k0 * so, so, q_panels.data() + q0 * D, nk, nq, scale, pt.data(), QB);
          for (int r = 0; r < nk; ++r) {
            float* row = pt.data() + r * QB;
#pragma omp simd
            for (int j = 0; j < nq; ++j) row[j] = exp_nonpositive(row[j] - l[j]);
          }
          if (kind == Pairs::kPartial) {  // valid[j][r]: query q0 + j, key k0 + r
            window.mask(b, len_q, len_k, q0, nq, k0, nk, valid.data(), KB);
            for (int r = 0; r < nk; ++r)
              for (int j = 0; j < nq; ++j)
                pt[r * QB + j] = valid[j * KB + r] > 0.0f ? pt[r * QB + j] : 0.0f;
          }
          pv_block<D>(pt.data(), QB, dor + q0 * so, so, nk, nq, dvr, sg);
          qk_block<D>(vp + k0 * rs, rs, do_panels.data() + q0 * D, nk, nq, 1.0f, dst.data(), QB);
          for (int r = 0; r < nk; ++r) {
            const float *p_row = pt.data() + r * QB;
            float* row = dst.data() + r * QB;
#pragma omp simd
            for (int j = 0; j < nq; ++j) row[j] = scale * p_row[j] * (row[j] - dl[j]);
          }
          pv_block<D>(dst.data(), QB, qr + q0 * so, so, nk, nq, dkr, sg);
          pv_block<D, true>(dst.data(), QB, kr + k0 * so, so, nq, nk, dqr + q0 * sg, sg);
        }
        for (int r = 0; contiguous && r < nk_block; ++r) {
          std::memcpy(dkp + (k0 + r) * rs, dkr + r * D, D * sizeof(float));
          std::memcpy(dvp + (k0 + r) * rs, dvr + r * D, D * sizeof(float));
        }
      }
      for (int64_t i = 0; contiguous && i < len_q; ++i)
        std::memcpy(dqp + i * rs, dqr + i * D, D * sizeof(float));
    }
  });
}

// As `attend_wide`: q, k, dq and dk [B, L, H, DK], v, d_out, out and dv [B, L, H, D]; DK = 0: the
// run-time key dim dim_k, whose dK and dQ are summed in column chunks (pv_cols), and whose
// last F columns may come from `ex` (a pair's rows of q, k, dq, dk then in scratch rows).
template <int DK, int D>
void attend_wide_backward(const float* q, const float* k, const float* v, const float* d_out,
                          const float* out, const float* lse, Pairs window, int64_t batch,
                          int64_t heads, int64_t len_q, int64_t len_k, int dim_k, float scale,
                          float* dq, float* dk, float* dv, ffi::ThreadPool& pool,
                          const Extra* ex = nullptr) {
  const int64_t pairs = batch * heads, rs = heads * D;
  const int64_t wk = DK > 0 ? DK : dim_k;
  const int64_t f = ex != nullptr ? ex->f : 0, dm = wk - f;  // columns of q and k themselves
  const int64_t rk = heads * dm;  // q, k, dq, dk: rows H * DK apart (H * (DK - F) with ex)
  // dK's columns: k_extra's are left out when it takes no gradient (a fifth of the work)
  const int wk_dk = static_cast<int>(ex != nullptr && ex->dk == nullptr ? dm : wk);
  const int64_t padded_q = (len_q + KP - 1) / KP * KP;
  const int64_t chunk = claim_chunk(batch, heads);
  const bool contiguous = std::max(len_q, len_k) >= kContiguousFrom;
  parallel(pool, chunks(pairs, chunk), [=](std::atomic<int64_t>& next) {
    std::vector<float> q_panels(padded_q * wk), do_panels(padded_q * D), pt(KB * QB),
        dst(KB * QB), valid(window.masked() ? QB * KB : 0), delta(len_q),
        do_rows(contiguous ? len_q * D : 0);
    std::vector<float> scratch(ex != nullptr ? 2 * (len_q + len_k) * wk : 0);
    Claims claims{next, pairs, chunk};
    for (int64_t pair; claims.get(pair);) {
      const int64_t b = pair / heads, h = pair % heads;
      const int64_t q_at = b * len_q * rs + h * D, k_at = b * len_k * rs + h * D;
      const int64_t qk_at = b * len_q * rk + h * dm, kk_at = b * len_k * rk + h * dm;
      const float *qp = q + qk_at, *dop = d_out + q_at, *kp = k + kk_at, *vp = v + k_at;
      const float *op = out + q_at, *lp = lse + b * len_q * heads + h;
      float *dqp = dq + qk_at, *dkp = dk + kk_at, *dvp = dv + k_at;
      int64_t rq = rk;  // the row stride of qp, kp, dqp, dkp
      const int64_t rke = ex != nullptr ? ex->k_heads * f : 0;
      const int64_t qe_at = (b * len_q * heads + h) * f;
      const int64_t ke_at = b * len_k * rke + (ex != nullptr && ex->k_heads > 1 ? h : 0) * f;
      const int64_t dke_at = (b * len_k * heads + h) * f;
      if (ex != nullptr) {  // the pair's rows of [q | q_extra] and [k | k_extra], contiguous
        float *qs = scratch.data(), *ks = qs + len_q * wk;
        gather_two(qp, rk, dm, ex->q + qe_at, heads * f, f, len_q, qs);
        gather_two(kp, rk, dm, ex->k + ke_at, rke, f, len_k, ks);
        qp = qs, kp = ks, dqp = ks + len_k * wk, dkp = dqp + len_q * wk, rq = wk;
      }
      for (int64_t i = 0; i < len_q; ++i) {
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int c = 0; c < D; ++c) sum += dop[i * rs + c] * op[i * rs + c];
        delta[i] = sum;
      }
      pack_keys<DK>(qp, len_q, rq, q_panels.data(), wk);
      pack_keys<D>(dop, len_q, rs, do_panels.data());
      const float* dor = dop;  // d_out's rows, `so` apart: in place or contiguous
      int64_t so = rs;
      if (contiguous) {
        pack_rows(dop, len_q, rs, D, do_rows.data());
        dor = do_rows.data(), so = D;
      }
      for (int64_t i = 0; i < len_q; ++i) std::fill(dqp + i * rq, dqp + i * rq + wk, 0.0f);
      for (int64_t k0 = 0; k0 < len_k; k0 += KB) {
        const int nk_block = static_cast<int>(std::min(KB, len_k - k0));
        for (int r = 0; r < nk_block; ++r) {
          std::fill(dkp + (k0 + r) * rq, dkp + (k0 + r) * rq + wk, 0.0f);
          std::fill(dvp + (k0 + r) * rs, dvp + (k0 + r) * rs + D, 0.0f);
        }
        for (int64_t qb0 = 0; qb0 < len_q; qb0 += QB) {
          int nq = static_cast<int>(std::min(QB, len_q - qb0));
          auto kind = window.tile(b, len_q, len_k, qb0, nq, k0, nk_block);
          if (kind == Pairs::kNone) continue;
          // As in the forward, a padded tile's rectangle runs unmasked: its queries
          // [q0, q0 + nq) (q0 a panel boundary, as the packed queries are read from it)
          // against keys [k0, k0 + nk).
          int64_t q0 = qb0, nk = nk_block, r0 = 0, r1 = nq, p = nk_block;
          if (kind == Pairs::kPartial &&
              window.rectangle(b, len_q, len_k, qb0, nq, k0, nk_block, r0, r1, p) &&
              r0 % KP == 0) {
            kind = Pairs::kFull;
            q0 = qb0 + r0, nq = static_cast<int>(r1 - r0), nk = static_cast<int>(p);
          }
          float l[QB], dl[QB];
          for (int j = 0; j < nq; ++j) {
            l[j] = lp[(q0 + j) * heads];
            dl[j] = delta[q0 + j];
          }
          qk_block<DK>(kp + k0 * rq, rq, q_panels.data() + q0 * wk, nk, nq, scale, pt.data(),
                       QB, wk);
          for (int r = 0; r < nk; ++r) {
            float* row = pt.data() + r * QB;
#pragma omp simd
            for (int j = 0; j < nq; ++j) row[j] = exp_nonpositive(row[j] - l[j]);
          }
          if (kind == Pairs::kPartial) {  // valid[j][r]: query q0 + j, key k0 + r
            window.mask(b, len_q, len_k, q0, nq, k0, nk, valid.data(), KB);
            for (int r = 0; r < nk; ++r)
              for (int j = 0; j < nq; ++j)
                pt[r * QB + j] = valid[j * KB + r] > 0.0f ? pt[r * QB + j] : 0.0f;
          }
          pv_block<D>(pt.data(), QB, dor + q0 * so, so, nk, nq, dvp + k0 * rs, rs);
          qk_block<D>(vp + k0 * rs, rs, do_panels.data() + q0 * D, nk, nq, 1.0f, dst.data(), QB);
          for (int r = 0; r < nk; ++r) {
            const float *p_row = pt.data() + r * QB;
            float* row = dst.data() + r * QB;
#pragma omp simd
            for (int j = 0; j < nq; ++j) row[j] = scale * p_row[j] * (row[j] - dl[j]);
          }
          pv_cols<DK>(dst.data(), QB, qp + q0 * rq, rq, nk, nq, dkp + k0 * rq, rq, wk_dk);
          pv_cols<DK, true>(dst.data(), QB, kp + k0 * rq, rq, nq, nk, dqp + q0 * rq, rq, wk);
        }
      }
      if (ex != nullptr) {  // dQ and dK back to q's and k's columns and the extra ones
        scatter_two(dqp, len_q, dq + qk_at, rk, dm, ex->dq + qe_at, heads * f, f);
        float* dke = ex->dk == nullptr ? nullptr : ex->dk + dke_at;
        scatter_two(dkp, len_k, dk + kk_at, rk, dm, dke, heads * f, f);
      }
    }
  });
}

// q and k's head dim DK when it differs from v's (a factored term: [q | q_extra] and
// [k | k_extra]): a multiple of 8 up to kMaxFactoredDim (native.py's FACTORED_DIMS).
constexpr int64_t kMaxFactoredDim = 512;
constexpr const char* kFactoredDims =
    "q and k's head_dim: v's, or a multiple of 8 from 8 to 512";
inline bool factored_dim(int64_t dim_k) {
  return dim_k >= 8 && dim_k <= kMaxFactoredDim && dim_k % 8 == 0;
}

// The Pairs of the arguments, checked: positions [B, Lq] and [B, Lk], k_ok [B, Lk], q_seg
// [B, Lq] and k_seg [B, Lk] (the last three read only when has_mask / has_segments).
ffi::Error pairs(ffi::Buffer<ffi::S32> q_pos, ffi::Buffer<ffi::S32> k_pos,
                 ffi::Buffer<ffi::S32> k_ok, ffi::Buffer<ffi::S32> q_seg,
                 ffi::Buffer<ffi::S32> k_seg, int64_t half, bool has_mask, bool has_segments,
                 int64_t batch, int64_t len_q, int64_t len_k, Pairs& out) {
  const int64_t nq = batch * len_q, nk = batch * len_k;
  if (q_pos.element_count() != nq || k_pos.element_count() != nk ||
      k_ok.element_count() != nk || q_seg.element_count() != nq || k_seg.element_count() != nk)
    return ffi::Error::InvalidArgument("q_pos, q_seg [B, Lq]; k_pos, k_ok, k_seg [B, Lk]");
  out = Pairs{q_pos.typed_data(), k_pos.typed_data(), half,
              has_mask ? k_ok.typed_data() : nullptr,
              has_segments ? q_seg.typed_data() : nullptr,
              has_segments ? k_seg.typed_data() : nullptr};
  return ffi::Error::Success();
}

ffi::Error Attend(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
                  ffi::Buffer<ffi::S32> q_pos, ffi::Buffer<ffi::S32> k_pos,
                  ffi::Buffer<ffi::S32> k_ok, ffi::Buffer<ffi::S32> q_seg,
                  ffi::Buffer<ffi::S32> k_seg, float scale, int64_t half, bool has_mask,
                  bool has_segments, int64_t block_q, int64_t block_k, ffi::ThreadPool pool,
                  ffi::ResultBuffer<ffi::F32> out, ffi::ResultBuffer<ffi::F32> lse) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4)
    return ffi::Error::InvalidArgument("q, k, v: rank 4 [batch, length, heads, head_dim]");
  const int64_t batch = qd[0], len_q = qd[1], heads = qd[2], dim = vd[3], len_k = kd[1];
  const int64_t dim_k = qd[3];
  for (int i : {0, 2, 3})
    if (kd[i] != qd[i] || (i < 3 && vd[i] != qd[i]))
      return ffi::Error::InvalidArgument("k: q's batch, heads and head_dim; v: q's batch and heads");
  if (vd[1] != len_k) return ffi::Error::InvalidArgument("v: k's length");
  if (dim_k != dim && !factored_dim(dim_k))
    return ffi::Error::InvalidArgument(kFactoredDims);
  Pairs window;
  if (auto error = pairs(q_pos, k_pos, k_ok, q_seg, k_seg, half, has_mask, has_segments, batch,
                         len_q, len_k, window);
      error.failure())
    return error;
  if (block_q < 1 || block_k < 1) return ffi::Error::InvalidArgument("blocks must be >= 1");
  if (batch * heads == 0 || len_q == 0) return ffi::Error::Success();
  if (len_k == 0) return ffi::Error::InvalidArgument("no keys");
  const float *qp = q.typed_data(), *kp = k.typed_data(), *vp = v.typed_data();
  float *op = out->typed_data(), *lp = lse->typed_data();
  const int wk = static_cast<int>(dim_k);
  switch (dim) {
#define POSJAX_FORWARD(D)                                                                   \
  case D:                                                                                   \
    if (dim_k == D)                                                                         \
      attend<D>(qp, kp, vp, window, batch, heads, len_q, len_k, scale, block_q, block_k, op,  \
                lp, pool);                                                                  \
    else                                                                                    \
      attend_wide<0, D>(qp, kp, vp, window, batch, heads, len_q, len_k, wk, scale, block_q, \
                        block_k, op, lp, pool);                                             \
    break;
    POSJAX_FORWARD(8)
    POSJAX_FORWARD(16)
    POSJAX_FORWARD(32)
    POSJAX_FORWARD(64)
    POSJAX_FORWARD(128)
#undef POSJAX_FORWARD
    default: return ffi::Error::InvalidArgument("head_dim must be 8, 16, 32, 64 or 128");
  }
  return ffi::Error::Success();
}

ffi::Error AttendBackward(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                          ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> d_out,
                          ffi::Buffer<ffi::F32> out, ffi::Buffer<ffi::F32> lse,
                          ffi::Buffer<ffi::S32> q_pos, ffi::Buffer<ffi::S32> k_pos,
                          ffi::Buffer<ffi::S32> k_ok, ffi::Buffer<ffi::S32> q_seg,
                          ffi::Buffer<ffi::S32> k_seg, float scale, int64_t half, bool has_mask,
                          bool has_segments, ffi::ThreadPool pool, ffi::ResultBuffer<ffi::F32> dq,
                          ffi::ResultBuffer<ffi::F32> dk, ffi::ResultBuffer<ffi::F32> dv) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions(),
             od = out.dimensions();
  const auto same = [](auto a, auto b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  };
  if (qd.size() != 4 || kd.size() != 4 || vd.size() != 4 || od.size() != 4 ||
      !same(d_out.dimensions(), od) || kd[0] != qd[0] || kd[2] != qd[2] || kd[3] != qd[3] ||
      vd[0] != qd[0] || vd[1] != kd[1] || vd[2] != qd[2] || od[0] != qd[0] ||
      od[1] != qd[1] || od[2] != qd[2] || od[3] != vd[3])
    return ffi::Error::InvalidArgument(
        "q [B, Lq, H, DK], k [B, Lk, H, DK], v [B, Lk, H, D], out and d_out [B, Lq, H, D]");
  const int64_t batch = qd[0], len_q = qd[1], heads = qd[2], dim = vd[3], len_k = kd[1];
  const int64_t dim_k = qd[3];
  if (dim_k != dim && !factored_dim(dim_k))
    return ffi::Error::InvalidArgument(kFactoredDims);
  const int64_t rows = batch * len_q * heads;
  if (lse.element_count() != rows) return ffi::Error::InvalidArgument("lse: [B, Lq, H]");
  Pairs window;
  if (auto error = pairs(q_pos, k_pos, k_ok, q_seg, k_seg, half, has_mask, has_segments, batch,
                         len_q, len_k, window);
      error.failure())
    return error;
  if (batch * heads == 0 || len_k == 0) return ffi::Error::Success();
  const float *qp = q.typed_data(), *kp = k.typed_data(), *vp = v.typed_data(),
              *dop = d_out.typed_data(), *op = out.typed_data(), *lp = lse.typed_data();
  float *dqp = dq->typed_data(), *dkp = dk->typed_data(), *dvp = dv->typed_data();
  const int wk = static_cast<int>(dim_k);
  switch (dim) {
#define POSJAX_BACKWARD(D)                                                                 \
  case D:                                                                                  \
    if (dim_k == D)                                                                        \
      attend_backward<D>(qp, kp, vp, dop, op, lp, window, batch, heads, len_q, len_k, scale,  \
                         dqp, dkp, dvp, pool);                                             \
    else                                                                                   \
      attend_wide_backward<0, D>(qp, kp, vp, dop, op, lp, window, batch, heads, len_q, len_k, \
                                 wk, scale, dqp, dkp, dvp, pool);                          \
    break;
    POSJAX_BACKWARD(8)
    POSJAX_BACKWARD(16)
    POSJAX_BACKWARD(32)
    POSJAX_BACKWARD(64)
    POSJAX_BACKWARD(128)
#undef POSJAX_BACKWARD
    default: return ffi::Error::InvalidArgument("head_dim must be 8, 16, 32, 64 or 128");
  }
  return ffi::Error::Success();
}

// The factored term's arrays checked against q [B, Lq, H, D] and k: q_extra [B, Lq, H, F],
// k_extra [B, Lk, 1 or H, F], D + F a key dim the kernel takes.
ffi::Error extra_arrays(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                        ffi::Buffer<ffi::F32> q_extra, ffi::Buffer<ffi::F32> k_extra,
                        Extra& ex) {
  const auto qd = q.dimensions(), kd = k.dimensions(), qe = q_extra.dimensions(),
             ke = k_extra.dimensions();
  if (qd.size() != 4 || kd.size() != 4 || qe.size() != 4 || ke.size() != 4 ||
      qe[0] != qd[0] || qe[1] != qd[1] || qe[2] != qd[2] || ke[0] != kd[0] ||
      ke[1] != kd[1] || (ke[2] != 1 && ke[2] != qd[2]) || ke[3] != qe[3] ||
      !factored_dim(qd[3] + qe[3]))
    return ffi::Error::InvalidArgument(
        "q_extra [B, Lq, H, F], k_extra [B, Lk, 1 or H, F], head_dim + F a multiple of 8 "
        "up to 512");
  ex = Extra{q_extra.typed_data(), k_extra.typed_data(), qe[3], ke[2], nullptr, nullptr};
  return ffi::Error::Success();
}

// Attend with q.k + q_extra.k_extra: q, k, v [B, L, H, D] as in Attend.
ffi::Error AttendFactored(ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k,
                          ffi::Buffer<ffi::F32> v, ffi::Buffer<ffi::F32> q_extra,
                          ffi::Buffer<ffi::F32> k_extra, ffi::Buffer<ffi::S32> q_pos,
                          ffi::Buffer<ffi::S32> k_pos, ffi::Buffer<ffi::S32> k_ok,
                          ffi::Buffer<ffi::S32> q_seg, ffi::Buffer<ffi::S32> k_seg, float scale,
                          int64_t half, bool has_mask, bool has_segments, int64_t block_q,
                          int64_t block_k, ffi::ThreadPool pool, ffi::ResultBuffer<ffi::F32> out,
                          ffi::ResultBuffer<ffi::F32> lse) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  if (qd.size() != 4 || kd.size() != 4 ||
      !std::equal(vd.begin(), vd.end(), kd.begin(), kd.end()) || kd[0] != qd[0] ||
      kd[2] != qd[2] || kd[3] != qd[3])
    return ffi::Error::InvalidArgument("q [B, Lq, H, D], k and v [B, Lk, H, D]");
  Extra ex;
  if (auto error = extra_arrays(q, k, q_extra, k_extra, ex); error.failure()) return error;
  const int64_t batch = qd[0], len_q = qd[1], heads = qd[2], dim = qd[3], len_k = kd[1];
  Pairs window;
  if (auto error = pairs(q_pos, k_pos, k_ok, q_seg, k_seg, half, has_mask, has_segments, batch,
                         len_q, len_k, window);
      error.failure())
    return error;
  if (block_q < 1 || block_k < 1) return ffi::Error::InvalidArgument("blocks must be >= 1");
  if (batch * heads == 0 || len_q == 0) return ffi::Error::Success();
  if (len_k == 0) return ffi::Error::InvalidArgument("no keys");
  const int wk = static_cast<int>(dim + ex.f);
  const float *qp = q.typed_data(), *kp = k.typed_data(), *vp = v.typed_data();
  float *op = out->typed_data(), *lp = lse->typed_data();
  switch (dim) {
#define POSJAX_FORWARD(D)                                                                   \
  case D:                                                                                   \
    attend_wide<0, D>(qp, kp, vp, window, batch, heads, len_q, len_k, wk, scale, block_q,    \
                      block_k, op, lp, pool, &ex);                                          \
    break;
    POSJAX_FORWARD(8)
    POSJAX_FORWARD(16)
    POSJAX_FORWARD(32)
    POSJAX_FORWARD(64)
    POSJAX_FORWARD(128)
#undef POSJAX_FORWARD
    default: return ffi::Error::InvalidArgument("head_dim must be 8, 16, 32, 64 or 128");
  }
  return ffi::Error::Success();
}

ffi::Error AttendFactoredBackward(
    ffi::Buffer<ffi::F32> q, ffi::Buffer<ffi::F32> k, ffi::Buffer<ffi::F32> v,
    ffi::Buffer<ffi::F32> q_extra, ffi::Buffer<ffi::F32> k_extra, ffi::Buffer<ffi::F32> d_out,
    ffi::Buffer<ffi::F32> out, ffi::Buffer<ffi::F32> lse, ffi::Buffer<ffi::S32> q_pos,
    ffi::Buffer<ffi::S32> k_pos, ffi::Buffer<ffi::S32> k_ok, ffi::Buffer<ffi::S32> q_seg,
    ffi::Buffer<ffi::S32> k_seg, float scale, int64_t half, bool has_mask, bool has_segments,
    ffi::ThreadPool pool, ffi::ResultBuffer<ffi::F32> dq, ffi::ResultBuffer<ffi::F32> dk,
    ffi::ResultBuffer<ffi::F32> dv, ffi::ResultBuffer<ffi::F32> dq_extra,
    ffi::ResultBuffer<ffi::F32> dk_extra) {
  const auto qd = q.dimensions(), kd = k.dimensions(), vd = v.dimensions();
  const auto same = [](auto a, auto b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  };
  if (qd.size() != 4 || kd.size() != 4 || !same(vd, kd) || !same(d_out.dimensions(), qd) ||
      !same(out.dimensions(), qd) || kd[0] != qd[0] || kd[2] != qd[2] || kd[3] != qd[3])
    return ffi::Error::InvalidArgument(
        "q, out and d_out [B, Lq, H, D], k and v [B, Lk, H, D]");
  Extra ex;
  if (auto error = extra_arrays(q, k, q_extra, k_extra, ex); error.failure()) return error;
  const int64_t batch = qd[0], len_q = qd[1], heads = qd[2], dim = qd[3], len_k = kd[1];
  if (lse.element_count() != batch * len_q * heads)
    return ffi::Error::InvalidArgument("lse: [B, Lq, H]");
  const int64_t dk_extra_count = dk_extra->element_count();
  if (dk_extra_count != batch * len_k * heads * ex.f && dk_extra_count != 0)
    return ffi::Error::InvalidArgument(
        "dk_extra: [B, Lk, H, F], or [B, Lk, H, 0] when k_extra takes no gradient");
  Pairs window;
  if (auto error = pairs(q_pos, k_pos, k_ok, q_seg, k_seg, half, has_mask, has_segments, batch,
                         len_q, len_k, window);
      error.failure())
    return error;
  if (batch * heads == 0 || len_k == 0) return ffi::Error::Success();
  ex.dq = dq_extra->typed_data();
  ex.dk = dk_extra_count == 0 ? nullptr : dk_extra->typed_data();
  const int wk = static_cast<int>(dim + ex.f);
  const float *qp = q.typed_data(), *kp = k.typed_data(), *vp = v.typed_data(),
              *dop = d_out.typed_data(), *op = out.typed_data(), *lp = lse.typed_data();
  float *dqp = dq->typed_data(), *dkp = dk->typed_data(), *dvp = dv->typed_data();
  switch (dim) {
#define POSJAX_BACKWARD(D)                                                                 \
  case D:                                                                                  \
    attend_wide_backward<0, D>(qp, kp, vp, dop, op, lp, window, batch, heads, len_q, len_k,  \
                               wk, scale, dqp, dkp, dvp, pool, &ex);                       \
    break;
    POSJAX_BACKWARD(8)
    POSJAX_BACKWARD(16)
    POSJAX_BACKWARD(32)
    POSJAX_BACKWARD(64)
    POSJAX_BACKWARD(128)
#undef POSJAX_BACKWARD
    default: return ffi::Error::InvalidArgument("head_dim must be 8, 16, 32, 64 or 128");
  }
  return ffi::Error::Success();
}

// out [cols, rows] = in [rows, cols] transposed, for the weight gradients' operands
// (posjax/models/cpu_ops.py): XLA:CPU's transpose of a [10240, 64] activation ran at ~1.4 GB/s,
// and ~8x slower still with the layer norm that produced it fused in, as XLA does. Here:
// strips of 8 rows per task, 8 x 8 blocks by register shuffles, the edges element by element.
#if defined(__AVX2__)
inline void transpose8x8(const float* in, int64_t ld_in, float* out, int64_t ld_out) {
  const __m256 r0 = _mm256_loadu_ps(in), r1 = _mm256_loadu_ps(in + ld_in),
               r2 = _mm256_loadu_ps(in + 2 * ld_in), r3 = _mm256_loadu_ps(in + 3 * ld_in),
               r4 = _mm256_loadu_ps(in + 4 * ld_in), r5 = _mm256_loadu_ps(in + 5 * ld_in),
               r6 = _mm256_loadu_ps(in + 6 * ld_in), r7 = _mm256_loadu_ps(in + 7 * ld_in);
  const __m256 t0 = _mm256_unpacklo_ps(r0, r1), t1 = _mm256_unpackhi_ps(r0, r1),
               t2 = _mm256_unpacklo_ps(r2, r3), t3 = _mm256_unpackhi_ps(r2, r3),
               t4 = _mm256_unpacklo_ps(r4, r5), t5 = _mm256_unpackhi_ps(r4, r5),
               t6 = _mm256_unpacklo_ps(r6, r7), t7 = _mm256_unpackhi_ps(r6, r7);
  const __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE),
               s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE),
               s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE),
               s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  _mm256_storeu_ps(out, _mm256_permute2f128_ps(s0, s4, 0x20));
  _mm256_storeu_ps(out + ld_out, _mm256_permute2f128_ps(s1, s5, 0x20));
  _mm256_storeu_ps(out + 2 * ld_out, _mm256_permute2f128_ps(s2, s6, 0x20));
  _mm256_storeu_ps(out + 3 * ld_out, _mm256_permute2f128_ps(s3, s7, 0x20));
  _mm256_storeu_ps(out + 4 * ld_out, _mm256_permute2f128_ps(s0, s4, 0x31));
  _mm256_storeu_ps(out + 5 * ld_out, _mm256_permute2f128_ps(s1, s5, 0x31));
  _mm256_storeu_ps(out + 6 * ld_out, _mm256_permute2f128_ps(s2, s6, 0x31));
  _mm256_storeu_ps(out + 7 * ld_out, _mm256_permute2f128_ps(s3, s7, 0x31));
}
#endif

ffi::Error Transpose(ffi::Buffer<ffi::F32> in, ffi::ThreadPool pool,
                     ffi::ResultBuffer<ffi::F32> out) {
  const auto d = in.dimensions();
  if (d.size() != 2) return ffi::Error::InvalidArgument("transpose: a rank-2 array");
  const int64_t rows = d[0], cols = d[1];
  const float* x = in.typed_data();
  float* y = out->typed_data();
  constexpr int64_t S = 64;  // rows per task
  const int64_t strips = (rows + S - 1) / S;
  parallel(pool, strips, [=](std::atomic<int64_t>& next) {
    for (int64_t t; (t = next.fetch_add(1)) < strips;) {
      const int64_t r_end = std::min((t + 1) * S, rows);
      int64_t r_full = t * S, c_full = 0;  // the rows and columns done in 8 x 8 blocks
#if defined(__AVX2__)
      // Column blocks outermost: each writes 8 output rows sequentially, and the strip's
      // input (S rows) stays in L1 across them.
      r_full = t * S + (r_end - t * S) / 8 * 8, c_full = cols / 8 * 8;
      for (int64_t c0 = 0; c0 < c_full; c0 += 8)
        for (int64_t r0 = t * S; r0 < r_full; r0 += 8)
          transpose8x8(x + r0 * cols + c0, cols, y + c0 * rows + r0, rows);
#endif
      for (int64_t c = 0; c < cols; ++c)  // the edges
        for (int64_t r = c < c_full ? r_full : t * S; r < r_end; ++r)
          y[c * rows + r] = x[r * cols + c];
    }
  });
  return ffi::Error::Success();
}

// LayerNorm over the last axis of x [rows, E], float32, for posjax/models/cpu_ops.py: one pass
// per row where XLA:CPU ran the statistics, the normalization and the backward's reductions as
// separate fusions, and materialized the scale broadcast to [rows, E] for each of them.
// Forward: y = (x - mean) * rstd * scale + bias, with each row's mean and rstd kept for the
// backward. Tasks are strips of `rows_per_task` rows, in a fixed order, so the sums over rows
// (the scale's and bias's gradients) come back per strip and add up the same way on any
// number of threads.
ffi::Error LayerNorm(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> scale,
                     ffi::Buffer<ffi::F32> bias, float eps, ffi::ThreadPool pool,
                     ffi::ResultBuffer<ffi::F32> y, ffi::ResultBuffer<ffi::F32> mean,
                     ffi::ResultBuffer<ffi::F32> rstd) {
  const auto d = x.dimensions();
  if (d.size() != 2) return ffi::Error::InvalidArgument("layer_norm: x [rows, features]");
  const int64_t rows = d[0], e = d[1];
  if (scale.element_count() != e || bias.element_count() != e)
    return ffi::Error::InvalidArgument("layer_norm: scale and bias [features]");
  const float *xp = x.typed_data(), *sp = scale.typed_data(), *bp = bias.typed_data();
  float *yp = y->typed_data(), *mp = mean->typed_data(), *rp = rstd->typed_data();
  constexpr int64_t S = 16;  // rows per task (the forward has no sums over rows)
  const int64_t tasks = (rows + S - 1) / S;
  const float inv_e = 1.0f / static_cast<float>(e);
  parallel(pool, tasks, [=](std::atomic<int64_t>& next) {
    for (int64_t t; (t = next.fetch_add(1)) < tasks;) {
      for (int64_t r = t * S; r < std::min((t + 1) * S, rows); ++r) {
        const float* xr = xp + r * e;
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t c = 0; c < e; ++c) sum += xr[c];
        const float mu = sum * inv_e;
        float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
        for (int64_t c = 0; c < e; ++c) sq += (xr[c] - mu) * (xr[c] - mu);
        const float rs = 1.0f / std::sqrt(sq * inv_e + eps);
        float* yr = yp + r * e;
#pragma omp simd
        for (int64_t c = 0; c < e; ++c) yr[c] = (xr[c] - mu) * rs * sp[c] + bp[c];
        mp[r] = mu;
        rp[r] = rs;
      }
    }
  });
  return ffi::Error::Success();
}

// Backward: g = dy * scale, xhat = (x - mean) * rstd, dx = rstd (g - mean(g) - xhat
// mean(g xhat)); d_scale and d_bias [tasks, E]: each strip's sums of dy * xhat and dy, which
// the caller adds up.
ffi::Error LayerNormBackward(ffi::Buffer<ffi::F32> x, ffi::Buffer<ffi::F32> scale,
                             ffi::Buffer<ffi::F32> mean, ffi::Buffer<ffi::F32> rstd,
                             ffi::Buffer<ffi::F32> dy, int64_t rows_per_task,
                             ffi::ThreadPool pool, ffi::ResultBuffer<ffi::F32> dx,
                             ffi::ResultBuffer<ffi::F32> d_scale,
                             ffi::ResultBuffer<ffi::F32> d_bias) {
  const auto d = x.dimensions();
  if (d.size() != 2) return ffi::Error::InvalidArgument("layer_norm: x [rows, features]");
  const int64_t rows = d[0], e = d[1], s = rows_per_task;
  if (s < 1) return ffi::Error::InvalidArgument("layer_norm: rows_per_task >= 1");
  const int64_t tasks = (rows + s - 1) / s;
  if (scale.element_count() != e || mean.element_count() != rows ||
      rstd.element_count() != rows || dy.element_count() != rows * e ||
      d_scale->element_count() != tasks * e || d_bias->element_count() != tasks * e)
    return ffi::Error::InvalidArgument(
        "layer_norm backward: scale [E], mean and rstd [rows], dy [rows, E], d_scale and "
        "d_bias [ceil(rows / rows_per_task), E]");
  const float *xp = x.typed_data(), *sp = scale.typed_data(), *mp = mean.typed_data(),
              *rp = rstd.typed_data(), *gp = dy.typed_data();
  float *dxp = dx->typed_data(), *dsp = d_scale->typed_data(), *dbp = d_bias->typed_data();
  const float inv_e = 1.0f / static_cast<float>(e);
  parallel(pool, tasks, [=](std::atomic<int64_t>& next) {
    for (int64_t t; (t = next.fetch_add(1)) < tasks;) {
      float *ds = dsp + t * e, *db = dbp + t * e;
      std::fill(ds, ds + e, 0.0f);
      std::fill(db, db + e, 0.0f);
      for (int64_t r = t * s; r < std::min((t + 1) * s, rows); ++r) {
        const float *xr = xp + r * e, *gr = gp + r * e;
        const float mu = mp[r], rs = rp[r];
        float sum_g = 0.0f, sum_gx = 0.0f;
#pragma omp simd reduction(+ : sum_g, sum_gx)
        for (int64_t c = 0; c < e; ++c) {
          const float xh = (xr[c] - mu) * rs, g = gr[c] * sp[c];
          sum_g += g;
          sum_gx += g * xh;
          ds[c] += gr[c] * xh;
          db[c] += gr[c];
        }
        const float a = sum_g * inv_e, b = sum_gx * inv_e;
        float* dr = dxp + r * e;
#pragma omp simd
        for (int64_t c = 0; c < e; ++c) dr[c] = rs * (gr[c] * sp[c] - a - (xr[c] - mu) * rs * b);
      }
    }
  });
  return ffi::Error::Success();
}

// n float32 arrays; both handlers take them, then the Pairs arrays and attributes.
template <int n, typename Binding>
auto Arrays(Binding binding) {
  if constexpr (n == 0) {
    return std::move(binding).template Arg<ffi::Buffer<ffi::S32>>()  // q_pos
        .template Arg<ffi::Buffer<ffi::S32>>()                       // k_pos
        .template Arg<ffi::Buffer<ffi::S32>>()                       // k_ok
        .template Arg<ffi::Buffer<ffi::S32>>()                       // q_seg
        .template Arg<ffi::Buffer<ffi::S32>>()                       // k_seg
        .template Attr<float>("scale")
        .template Attr<int64_t>("half")
        .template Attr<bool>("has_mask")
        .template Attr<bool>("has_segments");
  } else {
    return Arrays<n - 1>(std::move(binding).template Arg<ffi::Buffer<ffi::F32>>());
  }
}

}  // namespace

XLA_FFI_DEFINE_HANDLER_SYMBOL(posjax_cpu_attention, Attend,
                              Arrays<3>(ffi::Ffi::Bind())  // q, k, v
                                  .Attr<int64_t>("block_q")
                                  .Attr<int64_t>("block_k")
                                  .Ctx<ffi::ThreadPool>()
                                  .Ret<ffi::Buffer<ffi::F32>>()   // out
                                  .Ret<ffi::Buffer<ffi::F32>>());  // lse

XLA_FFI_DEFINE_HANDLER_SYMBOL(posjax_cpu_attention_backward, AttendBackward,
                              Arrays<6>(ffi::Ffi::Bind())  // q, k, v, d_out, out, lse
                                  .Ctx<ffi::ThreadPool>()
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dq
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dk
                                  .Ret<ffi::Buffer<ffi::F32>>());  // dv

XLA_FFI_DEFINE_HANDLER_SYMBOL(posjax_cpu_attention_factored, AttendFactored,
                              Arrays<5>(ffi::Ffi::Bind())  // q, k, v, q_extra, k_extra
                                  .Attr<int64_t>("block_q")
                                  .Attr<int64_t>("block_k")
                                  .Ctx<ffi::ThreadPool>()
                                  .Ret<ffi::Buffer<ffi::F32>>()   // out
                                  .Ret<ffi::Buffer<ffi::F32>>());  // lse

XLA_FFI_DEFINE_HANDLER_SYMBOL(posjax_cpu_attention_factored_backward, AttendFactoredBackward,
                              // q, k, v, q_extra, k_extra, d_out, out, lse
                              Arrays<8>(ffi::Ffi::Bind())
                                  .Ctx<ffi::ThreadPool>()
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dq
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dk
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dv
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dq_extra
                                  // dk_extra [B, Lk, H, F], or [B, Lk, H, 0]: none
                                  .Ret<ffi::Buffer<ffi::F32>>());

XLA_FFI_DEFINE_HANDLER_SYMBOL(posjax_cpu_transpose, Transpose,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // in [rows, cols]
                                  .Ctx<ffi::ThreadPool>()
                                  .Ret<ffi::Buffer<ffi::F32>>());  // out [cols, rows]

XLA_FFI_DEFINE_HANDLER_SYMBOL(posjax_cpu_layer_norm, LayerNorm,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // x [rows, E]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // scale [E]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // bias [E]
                                  .Attr<float>("eps")
                                  .Ctx<ffi::ThreadPool>()
                                  .Ret<ffi::Buffer<ffi::F32>>()   // y [rows, E]
                                  .Ret<ffi::Buffer<ffi::F32>>()   // mean [rows]
                                  .Ret<ffi::Buffer<ffi::F32>>());  // rstd [rows]

XLA_FFI_DEFINE_HANDLER_SYMBOL(posjax_cpu_layer_norm_backward, LayerNormBackward,
                              ffi::Ffi::Bind()
                                  .Arg<ffi::Buffer<ffi::F32>>()   // x [rows, E]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // scale [E]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // mean [rows]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // rstd [rows]
                                  .Arg<ffi::Buffer<ffi::F32>>()   // dy [rows, E]
                                  .Attr<int64_t>("rows_per_task")
                                  .Ctx<ffi::ThreadPool>()
                                  .Ret<ffi::Buffer<ffi::F32>>()   // dx [rows, E]
                                  .Ret<ffi::Buffer<ffi::F32>>()   // d_scale [tasks, E]
                                  .Ret<ffi::Buffer<ffi::F32>>());  // d_bias [tasks, E]
