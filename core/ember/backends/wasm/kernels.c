// ember's WebAssembly SIMD kernels: float32 GEMM on NumPy buffers inside Pyodide (zero copy).
//
// Built by core/ember/backends/wasm/build.py (`make kernels`, and `ember site` before it packs
// the wheel) twice: SIMD128 (4x8 register tile) and relaxed SIMD (6x8 tile, fused multiply-add),
// as Emscripten-style side modules that Pyodide's dynamic loader links into its own memory.
//
// Rules that keep this module from ever touching memory it does not own (PLATFORM.md):
// - no data segments, no globals, no stack: every value lives in wasm locals; build.py checks
//   the .wasm for all three. Scratch space (packed panels, one edge tile) comes from NumPy,
//   passed in as `work` with its length, and is checked before anything is written.
// - the only memory written is `c` (the output, m x n with row stride ldc) and `work`.
// - -nostdlib: a hidden memcpy/memset would be a link error (-mbulk-memory turns the ones the
//   optimiser invents into memory.copy/fill instructions instead).
//
// Strides are in elements and may be anything (transposed or sliced NumPy views): packing reads
// A and B through them once, so the micro-kernel always streams contiguous, zero-padded panels.

#include <wasm_simd128.h>

#define EXPORT(name) __attribute__((export_name(#name))) __attribute__((visibility("default")))

#ifdef __wasm_relaxed_simd__
#define MR 6  // 12 accumulators + 2 B vectors + 1 broadcast: 15 of x86-64's 16 vector registers
#define MADD(a, b, c) wasm_f32x4_relaxed_madd(a, b, c)
#else
#define MR 4  // a mul and an add per step: a 4x8 tile keeps both pipelines busy without spills
#define MADD(a, b, c) wasm_f32x4_add(wasm_f32x4_mul(a, b), c)
#endif
#define NR 8    // two f32x4 vectors of B per k
#define KC 256  // a B panel (KC x NR, 8 KiB) stays in L1 while every A panel of the block passes
#define MC 120  // an A block (MC x KC, 120 KiB) stays in L2; a multiple of both MRs

static inline int min_i(int a, int b) { return a < b ? a : b; }
static inline int round_up(int a, int b) { return (a + b - 1) / b * b; }

EXPORT(sgemm_mr) int sgemm_mr(void) { return MR; }
EXPORT(sgemm_nr) int sgemm_nr(void) { return NR; }
EXPORT(sgemm_kc) int sgemm_kc(void) { return KC; }
EXPORT(sgemm_mc) int sgemm_mc(void) { return MC; }

// Floats of scratch space sgemm needs for an m x n x k product: the packed B block of one KC
// slice over all of n, the packed A block, one edge tile. (ember computes the same from
// MR, NR, KC and MC, read once, to save a call per product.)
EXPORT(sgemm_work_size) int sgemm_work_size(int m, int n, int k) {
  (void)m;
  return min_i(k, KC) * round_up(n, NR) + MC * KC + MR * NR;
}

// B[k0:k0+kc, 0:n] -> panels of NR columns, each kc x NR row by row, the last one zero-padded.
static void pack_b(int kc, int n, const float *b, int rsb, int csb, float *out) {
  for (int j = 0; j < n; j += NR) {
    int nr = min_i(NR, n - j);
    const float *col = b + j * csb;
    if (nr == NR && csb == 1) {
      for (int p = 0; p < kc; p++) {
        const float *row = col + p * rsb;
        wasm_v128_store(out, wasm_v128_load(row));
        wasm_v128_store(out + 4, wasm_v128_load(row + 4));
        out += NR;
      }
    } else {
      for (int p = 0; p < kc; p++) {
        for (int q = 0; q < NR; q++) out[q] = q < nr ? col[p * rsb + q * csb] : 0.0f;
        out += NR;
      }
    }
  }
}

// A[i0:i0+mc, k0:k0+kc] -> panels of MR rows, each kc x MR (A transposed), zero-padded rows.
static void pack_a(int mc, int kc, const float *a, int rsa, int csa, float *out) {
  for (int i = 0; i < mc; i += MR) {
    int mr = min_i(MR, mc - i);
    const float *rows = a + i * rsa;
    for (int p = 0; p < kc; p++) {
      for (int r = 0; r < MR; r++) out[r] = r < mr ? rows[r * rsa + p * csa] : 0.0f;
      out += MR;
    }
  }
}

// One MR x NR tile of C (+)= packed A panel . packed B panel. A full tile goes straight to C; an
// edge tile goes through `tile` and only its mr x nr valid part reaches C.
static void micro(int kc, const float *a, const float *b, float *c, int ldc, int mr, int nr,
                  int accumulate, float *tile) {
  v128_t z = wasm_f32x4_splat(0.0f);
  v128_t c00 = z, c01 = z, c10 = z, c11 = z, c20 = z, c21 = z, c30 = z, c31 = z;
#if MR == 6
  v128_t c40 = z, c41 = z, c50 = z, c51 = z;
#endif
  for (int p = 0; p < kc; p++) {
    v128_t b0 = wasm_v128_load(b), b1 = wasm_v128_load(b + 4);
    v128_t a0 = wasm_v128_load32_splat(a), a1 = wasm_v128_load32_splat(a + 1);
    c00 = MADD(a0, b0, c00); c01 = MADD(a0, b1, c01);
    c10 = MADD(a1, b0, c10); c11 = MADD(a1, b1, c11);
    v128_t a2 = wasm_v128_load32_splat(a + 2), a3 = wasm_v128_load32_splat(a + 3);
    c20 = MADD(a2, b0, c20); c21 = MADD(a2, b1, c21);
    c30 = MADD(a3, b0, c30); c31 = MADD(a3, b1, c31);
#if MR == 6
    v128_t a4 = wasm_v128_load32_splat(a + 4), a5 = wasm_v128_load32_splat(a + 5);
    c40 = MADD(a4, b0, c40); c41 = MADD(a4, b1, c41);
    c50 = MADD(a5, b0, c50); c51 = MADD(a5, b1, c51);
#endif
    a += MR;
    b += NR;
  }
  int full = mr == MR && nr == NR;
  float *dst = full ? c : tile;
  int ld = full ? ldc : NR;
  int add = full && accumulate;
#define ROW(r, lo, hi)                                                                \
  do {                                                                                \
    float *d = dst + (r) * ld;                                                        \
    if (add) {                                                                        \
      lo = wasm_f32x4_add(lo, wasm_v128_load(d));                                     \
      hi = wasm_f32x4_add(hi, wasm_v128_load(d + 4));                                 \
    }                                                                                 \
    wasm_v128_store(d, lo);                                                           \
    wasm_v128_store(d + 4, hi);                                                       \
  } while (0)
  ROW(0, c00, c01); ROW(1, c10, c11); ROW(2, c20, c21); ROW(3, c30, c31);
#if MR == 6
  ROW(4, c40, c41); ROW(5, c50, c51);
#endif
#undef ROW
  if (!full) {
    for (int r = 0; r < mr; r++)
      for (int q = 0; q < nr; q++)
        c[r * ldc + q] = accumulate ? c[r * ldc + q] + tile[r * NR + q] : tile[r * NR + q];
  }
}

// A few rows of A (m < MR: a classifier or a linear layer at batch 1) against a B that is
// contiguous along one of its dims: packing B would move more bytes than the product reads, so
// stream B as it is. B row-major (csb == 1): each C row is a sum of B's rows scaled by A's
// elements. B column-major (rsb == 1, a transposed weight, x @ W.T): each C element is a dot
// product of two contiguous vectors. Both need A's rows contiguous (csa == 1).
static void rows_b_rows(int m, int n, int k, const float *a, int rsa, const float *b, int rsb,
                        float *c, int ldc) {
  for (int i = 0; i < m; i++) {
    const float *ai = a + i * rsa;
    float *ci = c + i * ldc;
    int j = 0;
    // 32 columns a pass: each row of B gives two whole cache lines (8 columns a pass used
    // half a line, so B crossed the memory bus twice: fc1's 1.6 MB at batch 1)
    for (; j + 32 <= n; j += 32) {
      v128_t z = wasm_f32x4_splat(0.0f), s0 = z, s1 = z, s2 = z, s3 = z, s4 = z, s5 = z,
             s6 = z, s7 = z;
      const float *bp = b + j;
      for (int p = 0; p < k; p++, bp += rsb) {
        v128_t x = wasm_v128_load32_splat(ai + p);
        s0 = MADD(x, wasm_v128_load(bp), s0);
        s1 = MADD(x, wasm_v128_load(bp + 4), s1);
        s2 = MADD(x, wasm_v128_load(bp + 8), s2);
        s3 = MADD(x, wasm_v128_load(bp + 12), s3);
        s4 = MADD(x, wasm_v128_load(bp + 16), s4);
        s5 = MADD(x, wasm_v128_load(bp + 20), s5);
        s6 = MADD(x, wasm_v128_load(bp + 24), s6);
        s7 = MADD(x, wasm_v128_load(bp + 28), s7);
      }
      wasm_v128_store(ci + j, s0);
      wasm_v128_store(ci + j + 4, s1);
      wasm_v128_store(ci + j + 8, s2);
      wasm_v128_store(ci + j + 12, s3);
      wasm_v128_store(ci + j + 16, s4);
      wasm_v128_store(ci + j + 20, s5);
      wasm_v128_store(ci + j + 24, s6);
      wasm_v128_store(ci + j + 28, s7);
    }
    for (; j + 8 <= n; j += 8) {
      v128_t s0 = wasm_f32x4_splat(0.0f), s1 = s0;
      for (int p = 0; p < k; p++) {
        v128_t x = wasm_v128_load32_splat(ai + p);
        s0 = MADD(x, wasm_v128_load(b + p * rsb + j), s0);
        s1 = MADD(x, wasm_v128_load(b + p * rsb + j + 4), s1);
      }
      wasm_v128_store(ci + j, s0);
      wasm_v128_store(ci + j + 4, s1);
    }
    for (; j < n; j++) {
      float s = 0.0f;
      for (int p = 0; p < k; p++) s += ai[p] * b[p * rsb + j];
      ci[j] = s;
    }
  }
}

static void rows_b_cols(int m, int n, int k, const float *a, int rsa, const float *b, int csb,
                        float *c, int ldc) {
  for (int i = 0; i < m; i++) {
    const float *ai = a + i * rsa;
    for (int j = 0; j < n; j++) {
      const float *bj = b + j * csb;
      v128_t s0 = wasm_f32x4_splat(0.0f), s1 = s0, s2 = s0, s3 = s0;
      int p = 0;
      for (; p + 16 <= k; p += 16) {
        s0 = MADD(wasm_v128_load(ai + p), wasm_v128_load(bj + p), s0);
        s1 = MADD(wasm_v128_load(ai + p + 4), wasm_v128_load(bj + p + 4), s1);
        s2 = MADD(wasm_v128_load(ai + p + 8), wasm_v128_load(bj + p + 8), s2);
        s3 = MADD(wasm_v128_load(ai + p + 12), wasm_v128_load(bj + p + 12), s3);
      }
      for (; p + 4 <= k; p += 4) s0 = MADD(wasm_v128_load(ai + p), wasm_v128_load(bj + p), s0);
      v128_t s = wasm_f32x4_add(wasm_f32x4_add(s0, s1), wasm_f32x4_add(s2, s3));
      float t = wasm_f32x4_extract_lane(s, 0) + wasm_f32x4_extract_lane(s, 1) +
                wasm_f32x4_extract_lane(s, 2) + wasm_f32x4_extract_lane(s, 3);
      for (; p < k; p++) t += ai[p] * bj[p];
      c[i * ldc + j] = t;
    }
  }
}

// C[m, n] = A[m, k] . B[k, n], float32. A's element (i, p) is a[i*rsa + p*csa], B's (p, j)
// b[p*rsb + j*csb], C's (i, j) c[i*ldc + j]. `work` holds work_len floats (sgemm_work_size).
// Returns 0, or -1 (nothing written) when work is too small.
EXPORT(sgemm) int sgemm(int m, int n, int k, const float *a, int rsa, int csa, const float *b,
                        int rsb, int csb, float *c, int ldc, float *work, int work_len) {
  if (m <= 0 || n <= 0) return 0;
  if (work_len < sgemm_work_size(m, n, k)) return -1;
  if (k <= 0) {
    for (int i = 0; i < m; i++)
      for (int j = 0; j < n; j++) c[i * ldc + j] = 0.0f;
    return 0;
  }
  if (m < MR && csa == 1 && csb == 1) {
    rows_b_rows(m, n, k, a, rsa, b, rsb, c, ldc);
    return 0;
  }
  if (m < MR && csa == 1 && rsb == 1) {
    rows_b_cols(m, n, k, a, rsa, b, csb, c, ldc);
    return 0;
  }
  float *pb = work;
  float *pa = pb + min_i(k, KC) * round_up(n, NR);
  float *tile = pa + MC * KC;
  for (int pc = 0; pc < k; pc += KC) {
    int kc = min_i(KC, k - pc);
    pack_b(kc, n, b + pc * rsb, rsb, csb, pb);
    for (int ic = 0; ic < m; ic += MC) {
      int mc = min_i(MC, m - ic);
      pack_a(mc, kc, a + ic * rsa + pc * csa, rsa, csa, pa);
      for (int jr = 0; jr < n; jr += NR) {
        for (int ir = 0; ir < mc; ir += MR) {
          micro(kc, pa + ir * kc, pb + jr * kc, c + (ic + ir) * ldc + jr, ldc,
                min_i(MR, mc - ir), min_i(NR, n - jr), pc > 0, tile);
        }
      }
    }
  }
  return 0;
}

// ---- strided copy (im2col) --------------------------------------------------------------------
// dst (C-contiguous) = src, a strided float32 view of up to 6 dims (shape d0..d5, strides s0..s5
// in elements, any sign): the convolutions' im2col copies their window view with it. NumPy's
// copy of such a view runs a scalar loop per innermost row; this one streams the rows.
EXPORT(copy_strided)
void copy_strided(float *dst, const float *src, int d0, int d1, int d2, int d3, int d4, int d5,
                  int s0, int s1, int s2, int s3, int s4, int s5) {
  for (int i0 = 0; i0 < d0; i0++)
    for (int i1 = 0; i1 < d1; i1++)
      for (int i2 = 0; i2 < d2; i2++)
        for (int i3 = 0; i3 < d3; i3++)
          for (int i4 = 0; i4 < d4; i4++) {
            const float *row = src + i0 * s0 + i1 * s1 + i2 * s2 + i3 * s3 + i4 * s4;
            int j = 0;
            if (s5 == 1) {
              for (; j + 4 <= d5; j += 4) wasm_v128_store(dst + j, wasm_v128_load(row + j));
            }
            for (; j < d5; j++) dst[j] = row[j * s5];
            dst += d5;
          }
}

// ---- conv2d: im2col, GEMM and bias in one call -------------------------------------------------
// out [N, O, OH, OW] (C-contiguous) = x [N, C, H, W] (*) wt [O, C/G, KH, KW] (C-contiguous)
// + bias [O] (or 0), PyTorch's cross-correlation: output (r, q) and kernel offset (i, j) read
// input row r * strh - top + i * dh and column q * strw - left + j * dw, zero outside the input
// (top, left < 0 crop). x's strides are in elements and may be anything. Per image and group
// the columns [C/G*KH*KW, OH*OW] are written into `cols` (so they stay in cache for the GEMM),
// then sgemm writes that image's channels of `out`. `work`: sgemm's scratch. In Python this
// was ~10 NumPy and ctypes calls per conv (padding, a strided view, the copy, the GEMM, the
// bias add): ~100 us of a small conv's ~130 inside Pyodide.

// One row of columns: dst[q] = src[(q * strw - left + j * dw) * sw] where that column exists.
static void column_row(float *dst, const float *src, int ow, int w, int sw, int strw, int c0) {
  // c0 = -left + j * dw: q reads column q * strw + c0, valid for q in [q_lo, q_hi)
  int q_lo = c0 >= 0 ? 0 : (-c0 + strw - 1) / strw;
  int q_hi = w - c0 <= 0 ? 0 : (w - c0 - 1) / strw + 1;
  if (q_hi > ow) q_hi = ow;
  if (q_lo > q_hi) q_lo = q_hi;
  int q = 0;
  for (; q < q_lo; q++) dst[q] = 0.0f;
  if (strw == 1 && sw == 1) {
    const float *s = src + c0;
    for (; q + 4 <= q_hi; q += 4) wasm_v128_store(dst + q, wasm_v128_load(s + q));
    for (; q < q_hi; q++) dst[q] = s[q];
  } else {
    for (; q < q_hi; q++) dst[q] = src[(q * strw + c0) * sw];
  }
  for (; q < ow; q++) dst[q] = 0.0f;
}

void rows_f32(float *out, const float *a, const float *b, int rows, int inner, int channels,
              int code);

EXPORT(conv2d_f32)
int conv2d_f32(const float *x, int n, int c, int h, int w, int sn, int sc, int sh, int sw,
               const float *wt, int o, int kh, int kw, int strh, int strw, int top, int left,
               int dh, int dw, int groups, int oh, int ow, const float *bias, float *out,
               float *cols, float *work, int work_len) {
  int cg = c / groups, og = o / groups, k = cg * kh * kw, p = oh * ow;
  for (int b = 0; b < n; b++) {
    for (int g = 0; g < groups; g++) {
      float *dst = cols;
      for (int ci = 0; ci < cg; ci++) {
        const float *plane = x + b * sn + (g * cg + ci) * sc;
        for (int i = 0; i < kh; i++)
          for (int j = 0; j < kw; j++)
            for (int r = 0; r < oh; r++, dst += ow) {
              int ir = r * strh - top + i * dh;
              if (ir < 0 || ir >= h) {
                for (int q = 0; q < ow; q++) dst[q] = 0.0f;
              } else {
                column_row(dst, plane + ir * sh, ow, w, sw, strw, j * dw - left);
              }
            }
      }
      int status = sgemm(og, p, k, wt + g * og * k, k, 1, cols, p, 1,
                         out + (b * o + g * og) * p, p, work, work_len);
      if (status) return status;
    }
    if (bias)  // this image's O rows of OH*OW, plus bias[row]: the per-channel add below
      rows_f32(out + b * o * p, out + b * o * p, bias, o, p, o, 0);
  }
  return 0;
}

// ---- Winograd F(2x2, 3x3): 3x3 convolutions at stride 1 -----------------------------------------
// Each 2x2 block of outputs is A^T [(G g G^T) . (B^T d B)] A of its 4x4 input tile d: the 16
// element-wise products, over all channels, are 16 GEMMs [O, C] @ [C, T] (T tiles) instead of one
// [O, 9C] @ [9C, 4T]: 2.25x fewer multiply-adds (conv2 of the MNIST ConvNet, 64x32 channels on
// 14x14: 3.6 M -> 1.6 M). The transforms use only additions and halvings, so float32 rounding
// stays within a few ulps of the direct sum's.
#define WINO_GROUP 4  // tiles a vector holds: four neighbours in a row of tiles

// u[O*C][16] = G g G^T per (o, c), its 16 elements together (written in one stream; the GEMMs
// read element e of every (o, c) as a strided [O, C] matrix, which packing A handles anyway)
static void wino_weights(const float *w, int oc, float *u) {
  for (int i = 0; i < oc; i++, u += 16) {
    const float *g = w + i * 9;
    float t[4][3];
    for (int j = 0; j < 3; j++) {
      float a = g[j], b = g[3 + j], d = g[6 + j];
      t[0][j] = a;
      t[1][j] = 0.5f * (a + b + d);
      t[2][j] = 0.5f * (a - b + d);
      t[3][j] = d;
    }
    for (int r = 0; r < 4; r++) {
      float a = t[r][0], b = t[r][1], d = t[r][2];
      u[r * 4 + 0] = a;
      u[r * 4 + 1] = 0.5f * (a + b + d);
      u[r * 4 + 2] = 0.5f * (a - b + d);
      u[r * 4 + 3] = d;
    }
  }
}

// B^T d B of 4x4 tiles, d[r][j] (each a vector over WINO_GROUP tiles or a float), into v[i*4+j]
#define WINO_IN(T, SUB, ADD)                                                                \
  do {                                                                                     \
    T e[4][4];                                                                             \
    for (int r = 0; r < 4; r++) {                                                          \
      e[r][0] = SUB(d[r][0], d[r][2]);                                                     \
      e[r][1] = ADD(d[r][1], d[r][2]);                                                     \
      e[r][2] = SUB(d[r][2], d[r][1]);                                                     \
      e[r][3] = SUB(d[r][1], d[r][3]);                                                     \
    }                                                                                      \
    for (int j = 0; j < 4; j++) {                                                          \
      v[0 + j] = SUB(e[0][j], e[2][j]);                                                    \
      v[4 + j] = ADD(e[1][j], e[2][j]);                                                    \
      v[8 + j] = SUB(e[2][j], e[1][j]);                                                    \
      v[12 + j] = SUB(e[1][j], e[3][j]);                                                   \
    }                                                                                      \
  } while (0)

// A^T m A of 4x4 tiles into y[0..3] = the 2x2 outputs (row-major)
#define WINO_OUT(T, SUB, ADD)                                                               \
  do {                                                                                     \
    T s0[4], s1[4];                                                                        \
    for (int j = 0; j < 4; j++) {                                                          \
      s0[j] = ADD(ADD(m[j], m[4 + j]), m[8 + j]);                                          \
      s1[j] = SUB(SUB(m[4 + j], m[8 + j]), m[12 + j]);                                     \
    }                                                                                      \
    y[0] = ADD(ADD(s0[0], s0[1]), s0[2]);                                                  \
    y[1] = SUB(SUB(s0[1], s0[2]), s0[3]);                                                  \
    y[2] = ADD(ADD(s1[0], s1[1]), s1[2]);                                                  \
    y[3] = SUB(SUB(s1[1], s1[2]), s1[3]);                                                  \
  } while (0)

#define FADD(a, b) ((a) + (b))
#define FSUB(a, b) ((a) - (b))

// Floats of scratch conv2d_winograd_f32 needs (ember computes the same from these terms).
EXPORT(conv2d_winograd_work_size)
int conv2d_winograd_work_size(int c, int o, int oh, int ow) {
  int th = (oh + 1) / 2, tw = (ow + 1) / 2, t = th * tw;
  return c * (2 * th + 2) * (2 * tw + 4) + 16 * (o * c + c * t + o * t) +
         sgemm_work_size(o, t, c);
}

// conv2d of x [N, C, H, W] (strides in elements) with w [O, C, 3, 3] (contiguous), stride 1,
// dilation 1, one group, padding top/left (bottom/right: whatever gives oh x ow), plus bias
// (or NULL), into out [N, O, OH, OW] (contiguous). work: conv2d_winograd_work_size floats.
// Returns 0, or -1 (nothing written) when work is too small.
EXPORT(conv2d_winograd_f32)
int conv2d_winograd_f32(const float *x, int n, int c, int h, int w, int sn, int sc, int sh,
                        int sw, const float *wt, int o, int top, int left, int oh, int ow,
                        const float *bias, float *out, float *work, int work_len) {
  if (work_len < conv2d_winograd_work_size(c, o, oh, ow)) return -1;
  int th = (oh + 1) / 2, tw = (ow + 1) / 2, t = th * tw;
  int hp = 2 * th + 2, wp = 2 * tw + 4;  // the padded input: every tile read is in bounds
  float *xp = work, *u = xp + c * hp * wp, *vv = u + 16 * o * c, *mm = vv + 16 * c * t;
  float *gemm = mm + 16 * o * t;
  int gemm_len = work_len - (int)(gemm - work);
  wino_weights(wt, o * c, u);
  for (int b = 0; b < n; b++) {
    // the zero-padded planes
    for (int ci = 0; ci < c; ci++) {
      const float *plane = x + b * sn + ci * sc;
      float *dst = xp + ci * hp * wp;
      for (int i = 0; i < hp; i++) {
        int r = i - top;
        float *row = dst + i * wp;
        if (r < 0 || r >= h) {
          for (int j = 0; j < wp; j++) row[j] = 0.0f;
        } else {  // im2col's row copy, of the whole padded row: column j reads j - left
          column_row(row, plane + r * sh, wp, w, sw, 1, -left);
        }
      }
    }
    // input transform: V[16][C][T]
    for (int ci = 0; ci < c; ci++) {
      const float *plane = xp + ci * hp * wp;
      for (int ty = 0; ty < th; ty++) {
        // groups of 4 tiles; the last group overlaps the one before (recomputing a few tiles
        // is cheaper than transforming the rest one at a time)
        int tx = 0;
        for (int last = 0; tw >= WINO_GROUP && !last; tx += WINO_GROUP) {
          if (tx + WINO_GROUP >= tw) {
            tx = tw - WINO_GROUP;
            last = 1;
          }
          v128_t d[4][4], v[16];
          for (int r = 0; r < 4; r++) {
            const float *row = plane + (2 * ty + r) * wp + 2 * tx;  // 12 floats, in bounds
            v128_t a = wasm_v128_load(row), bb = wasm_v128_load(row + 4),
                   cc = wasm_v128_load(row + 8);
            d[r][0] = wasm_i32x4_shuffle(a, bb, 0, 2, 4, 6);
            d[r][1] = wasm_i32x4_shuffle(a, bb, 1, 3, 5, 7);
            d[r][2] = wasm_i32x4_shuffle(d[r][0], cc, 1, 2, 3, 4);
            d[r][3] = wasm_i32x4_shuffle(d[r][1], cc, 1, 2, 3, 5);
          }
          WINO_IN(v128_t, wasm_f32x4_sub, wasm_f32x4_add);
          float *dst = vv + ci * t + ty * tw + tx;
          for (int e = 0; e < 16; e++) wasm_v128_store(dst + e * c * t, v[e]);
        }
        for (tx = tw >= WINO_GROUP ? tw : 0; tx < tw; tx++) {
          float d[4][4], v[16];
          for (int r = 0; r < 4; r++)
            for (int j = 0; j < 4; j++) d[r][j] = plane[(2 * ty + r) * wp + 2 * tx + j];
          WINO_IN(float, FSUB, FADD);
          float *dst = vv + ci * t + ty * tw + tx;
          for (int e = 0; e < 16; e++) dst[e * c * t] = v[e];
        }
      }
    }
    for (int e = 0; e < 16; e++) {
      int status = sgemm(o, t, c, u + e, 16 * c, 16, vv + e * c * t, t, 1, mm + e * o * t,
                         t, gemm, gemm_len);
      if (status) return status;
    }
    // output transform, plus the bias
    for (int oi = 0; oi < o; oi++) {
      float *plane = out + (b * o + oi) * oh * ow;
      float bo = bias ? bias[oi] : 0.0f;
      v128_t bv = wasm_f32x4_splat(bo);
      for (int ty = 0; ty < th; ty++) {
        int r0 = 2 * ty, two_rows = r0 + 1 < oh;
        // groups of 4 tiles whose 8 columns are all inside the row, the last one overlapping;
        // what they leave (an odd last column, rows narrower than 8) one tile at a time
        int full = ow / 2;  // tiles with both columns inside
        int tx = 0;
        for (int last = 0; full >= WINO_GROUP && !last; tx += WINO_GROUP) {
          if (tx + WINO_GROUP >= full) {
            tx = full - WINO_GROUP;
            last = 1;
          }
          v128_t m[16], y[4];
          const float *src = mm + oi * t + ty * tw + tx;
          for (int e = 0; e < 16; e++) m[e] = wasm_v128_load(src + e * o * t);
          WINO_OUT(v128_t, wasm_f32x4_sub, wasm_f32x4_add);
          float *row = plane + r0 * ow + 2 * tx;
          for (int k = 0; k < 4; k++) y[k] = wasm_f32x4_add(y[k], bv);
          wasm_v128_store(row, wasm_i32x4_shuffle(y[0], y[1], 0, 4, 1, 5));
          wasm_v128_store(row + 4, wasm_i32x4_shuffle(y[0], y[1], 2, 6, 3, 7));
          if (two_rows) {
            wasm_v128_store(row + ow, wasm_i32x4_shuffle(y[2], y[3], 0, 4, 1, 5));
            wasm_v128_store(row + ow + 4, wasm_i32x4_shuffle(y[2], y[3], 2, 6, 3, 7));
          }
        }
        for (tx = full >= WINO_GROUP ? full : 0; tx < tw; tx++) {
          float m[16], y[4];
          const float *src = mm + oi * t + ty * tw + tx;
          for (int e = 0; e < 16; e++) m[e] = src[e * o * t];
          WINO_OUT(float, FSUB, FADD);
          int c0 = 2 * tx, two_cols = c0 + 1 < ow;
          plane[r0 * ow + c0] = y[0] + bo;
          if (two_cols) plane[r0 * ow + c0 + 1] = y[1] + bo;
          if (two_rows) {
            plane[(r0 + 1) * ow + c0] = y[2] + bo;
            if (two_cols) plane[(r0 + 1) * ow + c0 + 1] = y[3] + bo;
          }
        }
      }
    }
  }
  return 0;
}

// ---- max pooling's indices ----------------------------------------------------------------------
// out[N, C, OH, OW] (int32, C-contiguous) = the flat index (into H*W) of each window's maximum
// over the real (unpadded) elements of x [N, C, H, W] (strides in elements), PyTorch's rule:
// scan the window in order and take a value when it is larger or NaN, starting from the first
// real element (so ties go to the first maximum, and the last NaN wins).

// One output, any window (clipped at the borders); its maximum goes to *value unless that is 0.
static int pool_one(const float *plane, int h, int w, int sh, int sw, int r0, int c0, int kh,
                    int kw, int dh, int dw, float *value) {
  float best = 0.0f;
  int where = -1;
  for (int u = 0; u < kh; u++) {
    int r = r0 + u * dh;
    if (r < 0 || r >= h) continue;
    for (int v = 0; v < kw; v++) {
      int q = c0 + v * dw;
      if (q < 0 || q >= w) continue;
      float val = plane[r * sh + q * sw];
      if (where < 0 || val > best || val != val) {  // the first real one, even -inf
        best = val;
        where = r * w + q;
      }
    }
  }
  if (value) *value = best;
  return where;
}

#define INLINE static inline __attribute__((always_inline))

// The values of one window element for four neighbouring outputs, `lane` floats apart.
INLINE v128_t four_apart(const float *p, int lane) {
  if (lane == 1) return wasm_v128_load(p);
  if (lane == 2)  // stride 2 (most pools): p[0, 2, 4, 6] from two loads, none past p[6]
    return wasm_i32x4_shuffle(wasm_v128_load(p), wasm_v128_load(p + 3), 0, 2, 5, 7);
  return wasm_f32x4_make(p[0], p[lane], p[2 * lane], p[3 * lane]);
}

// A window element taken where it is larger or NaN: the running maxima and their positions.
#define POOL_STEP(val, pos, best, where)                                            \
  do {                                                                              \
    v128_t take_ = wasm_v128_or(wasm_f32x4_gt(val, best), wasm_f32x4_ne(val, val)); \
    best = wasm_v128_bitselect(val, best, take_);                                   \
    where = wasm_v128_bitselect(pos, where, take_);                                 \
  } while (0)

// Four neighbouring outputs j..j+3 of one row, their windows inside the input, one lane each.
INLINE void pool4(const float *plane, int w, int sh, int sw, int r0, int kh, int kw, int step,
                  int pw, int dh, int dw, int lane, v128_t spread, int j, int *out, float *vals) {
  int c0 = j * step - pw;
  const float *p = plane + r0 * sh + c0 * sw;
  v128_t cols = wasm_i32x4_add(wasm_i32x4_splat(r0 * w + c0), spread);
  v128_t best = four_apart(p, lane), where = cols;
  for (int u = 0; u < kh; u++)
    for (int v = u == 0; v < kw; v++) {
      v128_t off = wasm_i32x4_splat(u * dh * w + v * dw);
      POOL_STEP(four_apart(p + u * dh * sh + v * dw * sw, lane), wasm_i32x4_add(cols, off),
                best, where);
    }
  wasm_v128_store(out + j, where);
  if (vals) wasm_v128_store(vals + j, best);
}

// One row of outputs of one plane (output row starting at input row r0, its windows inside the
// input's rows). Outputs [j_lo, j_hi) have windows inside the columns too: eight, then four at
// a time, one lane per output, branch-free (two independent chains keep the engine busy);
// the rest one by one. `lane` (step * sw) is a constant where the caller specialises it.
INLINE void pool_row(const float *plane, int h, int w, int sh, int sw, int r0, int kh, int kw,
                     int step, int pw, int dh, int dw, int ow, int j_lo, int j_hi,
                     int lane, int *out, float *vals) {
  int j = 0;
  for (; j < j_lo && j < ow; j++)
    out[j] = pool_one(plane, h, w, sh, sw, r0, j * step - pw, kh, kw, dh, dw, vals ? vals + j : 0);
  v128_t spread = wasm_i32x4_make(0, step, 2 * step, 3 * step);
  for (; j + 8 <= j_hi; j += 8) {
    int c0 = j * step - pw;
    const float *p = plane + r0 * sh + c0 * sw;
    v128_t cols = wasm_i32x4_add(wasm_i32x4_splat(r0 * w + c0), spread);
    v128_t cols2 = wasm_i32x4_add(cols, wasm_i32x4_splat(4 * step));
    v128_t best = four_apart(p, lane), best2 = four_apart(p + 4 * lane, lane);
    v128_t where = cols, where2 = cols2;
    for (int u = 0; u < kh; u++)
      for (int v = u == 0; v < kw; v++) {  // (0, 0) is the start
        const float *q = p + u * dh * sh + v * dw * sw;
        v128_t off = wasm_i32x4_splat(u * dh * w + v * dw);
        v128_t val = four_apart(q, lane), val2 = four_apart(q + 4 * lane, lane);
        POOL_STEP(val, wasm_i32x4_add(cols, off), best, where);
        POOL_STEP(val2, wasm_i32x4_add(cols2, off), best2, where2);
      }
    wasm_v128_store(out + j, where);
    wasm_v128_store(out + j + 4, where2);
    if (vals) {
      wasm_v128_store(vals + j, best);
      wasm_v128_store(vals + j + 4, best2);
    }
  }
  for (; j + 4 <= j_hi; j += 4)
    pool4(plane, w, sh, sw, r0, kh, kw, step, pw, dh, dw, lane, spread, j, out, vals);
  if (j < j_hi && j_hi - 4 >= j_lo) {
    // the interior's last 1-3 outputs: one more block of four, overlapping the one before (its
    // outputs are written twice, with the same values); scalar windows cost ~15 ns each, and
    // a 28-wide plane pooled 2x2 had two of its 14 outputs a row left to them
    pool4(plane, w, sh, sw, r0, kh, kw, step, pw, dh, dw, lane, spread, j_hi - 4, out, vals);
    j = j_hi;
  }
  for (; j < ow; j++)
    out[j] = pool_one(plane, h, w, sh, sw, r0, j * step - pw, kh, kw, dh, dw, vals ? vals + j : 0);
}

// vals: 0, or where each window's maximum goes too (max_pool2d's values; `out` then is scratch)
EXPORT(max_pool2d_indices)
void max_pool2d_indices(const float *x, int n, int c, int h, int w, int sn, int sc, int sh,
                        int sw, int kh, int kw, int strh, int strw, int ph, int pw, int dh, int dw,
                        int oh, int ow, int *out, float *vals) {
  // the outputs j in [j_lo, j_hi) have windows inside the input's columns
  int j_lo = (pw + strw - 1) / strw;
  int j_hi = (w - 1 - (kw - 1) * dw + pw) / strw + 1;
  if (j_hi > ow) j_hi = ow;
  if (w - 1 - (kw - 1) * dw + pw < 0) j_hi = 0;
  int lane = strw * sw;
  for (int b = 0; b < n; b++)
    for (int ch = 0; ch < c; ch++) {
      const float *plane = x + b * sn + ch * sc;
      for (int i = 0; i < oh; i++) {
        int r0 = i * strh - ph;
        if (r0 >= 0 && r0 + (kh - 1) * dh < h) {  // the row's windows inside the input's rows
          // the common element spacings get their own copy of the row loop (constant `lane`)
          if (lane == 2)
            pool_row(plane, h, w, sh, sw, r0, kh, kw, strw, pw, dh, dw, ow, j_lo, j_hi, 2,
                     out, vals);
          else if (lane == 1)
            pool_row(plane, h, w, sh, sw, r0, kh, kw, strw, pw, dh, dw, ow, j_lo, j_hi, 1,
                     out, vals);
          else
            pool_row(plane, h, w, sh, sw, r0, kh, kw, strw, pw, dh, dw, ow, j_lo, j_hi,
                     lane, out, vals);
        } else {
          for (int j = 0; j < ow; j++)
            out[j] = pool_one(plane, h, w, sh, sw, r0, j * strw - pw, kh, kw, dh, dw,
                              vals ? vals + j : 0);
        }
        out += ow;
        if (vals) vals += ow;
      }
    }
}

// ---- gather and select on flat arrays ---------------------------------------------------------
// NumPy inside Pyodide runs these a scalar element at a time, with a separate pass for each
// check; one pass each here.

// out[i] = x[idx[i]] for i < n (x: `size` contiguous floats, idx: contiguous int32): max
// pooling's values, gathered from the flattened input. Returns 0, or -1 at the first index
// outside [0, size) (out is then partly written; the caller discards it and reports the index).
EXPORT(take_f32)
int take_f32(float *out, const float *x, int size, const int *idx, int n) {
  for (int i = 0; i < n; i++) {
    unsigned j = (unsigned)idx[i];  // a negative index wraps to a huge one: one comparison
    if (j >= (unsigned)size) return -1;
    out[i] = x[j];
  }
  return 0;
}

// out[i] = mask[i] ? value : x[i] (mask: NumPy bools, one byte each, 0 or 1; all contiguous):
// mask_where with a scalar (ReLU's select). `value` comes as the float's bits.
EXPORT(select_f32)
void select_f32(float *out, const unsigned char *mask, int value_bits, const float *x, int n) {
  v128_t value = wasm_i32x4_splat(value_bits);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    v128_t m8 = wasm_i8x16_ne(wasm_v128_load(mask + i), wasm_i8x16_splat(0));  // 0 or -1 bytes
    v128_t lo = wasm_i16x8_extend_low_i8x16(m8), hi = wasm_i16x8_extend_high_i8x16(m8);
    v128_t m0 = wasm_i32x4_extend_low_i16x8(lo), m1 = wasm_i32x4_extend_high_i16x8(lo);
    v128_t m2 = wasm_i32x4_extend_low_i16x8(hi), m3 = wasm_i32x4_extend_high_i16x8(hi);
    wasm_v128_store(out + i, wasm_v128_bitselect(value, wasm_v128_load(x + i), m0));
    wasm_v128_store(out + i + 4, wasm_v128_bitselect(value, wasm_v128_load(x + i + 4), m1));
    wasm_v128_store(out + i + 8, wasm_v128_bitselect(value, wasm_v128_load(x + i + 8), m2));
    wasm_v128_store(out + i + 12, wasm_v128_bitselect(value, wasm_v128_load(x + i + 12), m3));
  }
  float v = wasm_f32x4_extract_lane(value, 0);
  for (; i < n; i++) out[i] = mask[i] ? v : x[i];
}

// out[i] = max(x[i], 0) as NumPy's maximum: NaN and -0.0 kept (pmax is x < 0 ? 0 : x). The relu
// op; out may be x itself.
EXPORT(relu_f32)
void relu_f32(float *out, const float *x, int n) {
  v128_t zero = wasm_f32x4_splat(0.0f);
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    v128_t a = wasm_v128_load(x + i), b = wasm_v128_load(x + i + 4);
    v128_t c = wasm_v128_load(x + i + 8), d = wasm_v128_load(x + i + 12);
    wasm_v128_store(out + i, wasm_f32x4_pmax(a, zero));
    wasm_v128_store(out + i + 4, wasm_f32x4_pmax(b, zero));
    wasm_v128_store(out + i + 8, wasm_f32x4_pmax(c, zero));
    wasm_v128_store(out + i + 12, wasm_f32x4_pmax(d, zero));
  }
  for (; i < n; i++) out[i] = x[i] < 0.0f ? 0.0f : x[i];
}

// out[i] = x[i] OP value (out: NumPy bools, one byte each; all contiguous), OP by `code`: 0 ==,
// 1 !=, 2 <, 3 <=, 4 >, 5 >= (IEEE: only != holds for a NaN): a comparison with a scalar
// (ReLU's x <= 0). `value` comes as the float's bits.
#define COMPARE_LOOP(vop, sop)                                                          \
  for (; i + 16 <= n; i += 16) {                                                        \
    v128_t m0 = vop(wasm_v128_load(x + i), value), m1 = vop(wasm_v128_load(x + i + 4), value); \
    v128_t m2 = vop(wasm_v128_load(x + i + 8), value);                                  \
    v128_t m3 = vop(wasm_v128_load(x + i + 12), value);                                 \
    v128_t m = wasm_i8x16_narrow_i16x8(wasm_i16x8_narrow_i32x4(m0, m1),                 \
                                       wasm_i16x8_narrow_i32x4(m2, m3)); /* -1 or 0 */  \
    wasm_v128_store(out + i, wasm_v128_and(m, wasm_i8x16_splat(1)));                    \
  }                                                                                     \
  for (; i < n; i++) out[i] = x[i] sop v;

EXPORT(compare_f32)
void compare_f32(unsigned char *out, const float *x, int value_bits, int code, int n) {
  v128_t value = wasm_i32x4_splat(value_bits);
  float v = wasm_f32x4_extract_lane(value, 0);
  int i = 0;
  switch (code) {
    case 0: COMPARE_LOOP(wasm_f32x4_eq, ==) break;
    case 1: COMPARE_LOOP(wasm_f32x4_ne, !=) break;
    case 2: COMPARE_LOOP(wasm_f32x4_lt, <) break;
    case 3: COMPARE_LOOP(wasm_f32x4_le, <=) break;
    case 4: COMPARE_LOOP(wasm_f32x4_gt, >) break;
    default: COMPARE_LOOP(wasm_f32x4_ge, >=) break;
  }
}

// ---- add and multiply, float32, with a per-channel operand ---------------------------------------
// out[r * inner + j] = a[r * inner + j] OP b[r % channels] (code 0: +, 1: *), all contiguous;
// inner == 1 with channels == rows is the plain elementwise case. out may be a (the result
// written over a donated input: each element is read before it is written). A convolution's bias
// and BatchNorm's scale and shift are such operands ([1, C, 1, 1] against [N, C, H, W]).
#define ROWS_LOOP(vop, sop)                                                           \
  if (inner == 1 && channels == rows) {                                               \
    int i = 0;                                                                        \
    for (; i + 4 <= rows; i += 4)                                                     \
      wasm_v128_store(out + i, vop(wasm_v128_load(a + i), wasm_v128_load(b + i)));    \
    for (; i < rows; i++) out[i] = a[i] sop b[i];                                     \
  } else {                                                                            \
    for (int r = 0; r < rows; r++) {                                                  \
      float s = b[r % channels];                                                      \
      v128_t sv = wasm_f32x4_splat(s);                                                \
      const float *ar = a + r * inner;                                                \
      float *o = out + r * inner;                                                     \
      int j = 0;                                                                      \
      for (; j + 4 <= inner; j += 4) wasm_v128_store(o + j, vop(wasm_v128_load(ar + j), sv)); \
      for (; j < inner; j++) o[j] = ar[j] sop s;                                      \
    }                                                                                 \
  }

EXPORT(rows_f32)
void rows_f32(float *out, const float *a, const float *b, int rows, int inner, int channels,
              int code) {
  if (code == 0) {
    ROWS_LOOP(wasm_f32x4_add, +)
  } else {
    ROWS_LOOP(wasm_f32x4_mul, *)
  }
}

// ---- a lowered plan: many kernel calls in one --------------------------------------------------
// ember.jit replays a model's ops; where each is one of these kernels on fixed buffers, the whole
// sequence is one call: prog holds, per kernel call, its code, its argument count and the
// arguments (int32; pointers are addresses in this 32-bit memory), n words in all. Inside
// Pyodide the Python around each call (~5-10 us) cost as much as a small layer. The codes are
// ember's PROGRAM_KERNELS (backends/wasm/__init__.py), in order. Returns 0, or the first
// nonzero status of a kernel (nothing after it runs), or -2 for an unknown code.
#define P(i) ((void *)(unsigned long)a[i])
EXPORT(run_program)
int run_program(const int *prog, int n) {
  for (int i = 0; i < n;) {
    int code = prog[i], count = prog[i + 1], status = 0;
    const int *a = prog + i + 2;
    switch (code) {
      case 0:
        status = sgemm(a[0], a[1], a[2], P(3), a[4], a[5], P(6), a[7], a[8], P(9), a[10], P(11),
                       a[12]);
        break;
      case 1:
        status = conv2d_f32(P(0), a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], P(9), a[10],
                            a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], a[19], a[20],
                            a[21], P(22), P(23), P(24), P(25), a[26]);
        break;
      case 2:
        status = conv2d_winograd_f32(P(0), a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], P(9),
                                     a[10], a[11], a[12], a[13], a[14], P(15), P(16), P(17),
                                     a[18]);
        break;
      case 3:
        rows_f32(P(0), P(1), P(2), a[3], a[4], a[5], a[6]);
        break;
      case 4:
        relu_f32(P(0), P(1), a[2]);
        break;
      case 5:
        max_pool2d_indices(P(0), a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10],
                           a[11], a[12], a[13], a[14], a[15], a[16], a[17], a[18], P(19), P(20));
        break;
      case 6:
        select_f32(P(0), P(1), a[2], P(3), a[4]);
        break;
      case 7:
        compare_f32(P(0), P(1), a[2], a[3], a[4]);
        break;
      default:
        return -2;
    }
    if (status) return status;
    i += 2 + count;
  }
  return 0;
}
#undef P
