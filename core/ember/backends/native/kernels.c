// ember's native CPU kernels, on NumPy's own buffers (zero copy): what NumPy can only do in many
// array passes or through large temporaries.
// - GELU and its gradient: one pass each where NumPy needs ~14 and ~9 (ops/numerics.py).
// - Convolutions at stride 1 (conv2d and its two gradients): directly from the padded input,
//   where NumPy's path writes and reads im2col columns 9x the input's size.
//
// Compiled on first use by core/ember/backends/native (the host's C compiler, -O3, tuned to
// this CPU; the .so is cached) and called through ctypes, which releases the GIL: the
// convolutions take a range of images, so the caller runs a thread per core. CPython only
// (inside Pyodide NdArray has its WebAssembly kernels instead). The loops are plain C that the
// compiler vectorizes (`omp simd`, GCC/clang vector extensions). No headers and no libc calls,
// so building needs a compiler and a linker only (-nostdlib); expf is below.
//
// Results follow numerics.py's float32 formulas and ops/nn.py's sums, so NumPy's path and this
// one agree to float32 rounding (tests/backends/test_native.py).

typedef long long i64;

// Phi(x) = 1/2 + x P(x^2) / Q(x^2), clipped to [0, 1]: numerics.py's float32 fit of the normal
// CDF, its 6 + 6 coefficients in `pq` (ember passes numerics._GELU_F32_PQ: one table for both).
#define PHI_LIMIT 5.656854249492381f  // 4 sqrt(2): erf(4) rounds to 1 in float32
#define LOAD_PQ(pq)                                                                 \
  const float p0 = pq[0], p1 = pq[1], p2 = pq[2], p3 = pq[3], p4 = pq[4], p5 = pq[5], \
              q0 = pq[6], q1 = pq[7], q2 = pq[8], q3 = pq[9], q4 = pq[10], q5 = pq[11]

static inline float cdf(float v, float p0, float p1, float p2, float p3, float p4, float p5,
                        float q0, float q1, float q2, float q3, float q4, float q5) {
  float x = v < -PHI_LIMIT ? -PHI_LIMIT : (v > PHI_LIMIT ? PHI_LIMIT : v);  // NaN stays NaN
  float s = x * x;
  float p = ((((p5 * s + p4) * s + p3) * s + p2) * s + p1) * s + p0;
  float q = ((((q5 * s + q4) * s + q3) * s + q2) * s + q1) * s + q0;
  float c = 0.5f + x * p / q;
  return c < 0.0f ? 0.0f : (c > 1.0f ? 1.0f : c);
}
#define CDF(v) cdf(v, p0, p1, p2, p3, p4, p5, q0, q1, q2, q3, q4, q5)

// e^t for t <= 0 (the only arguments here): t = n ln2 + r with |r| <= ln2 / 2, e^r by its
// Taylor series to r^7 (truncation < 6e-9, a tenth of an ulp), 2^n put into the exponent bits.
// Below -87 the result would be subnormal: 0 (so x e^t at x = inf is NaN, as in NumPy).
static inline float exp_neg(float t) {
  float tc = t < -87.0f ? -87.0f : t;
  const float shifter = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  float n = (tc * 1.4426950408889634f + shifter) - shifter;
  float r = (tc - n * 0.693145751953125f) - n * 1.4286068203094172e-06f;  // ln2 in two parts
  float e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 +
            r * (1.0f / 720 + r * (1.0f / 5040)))))));
  union { int i; float f; } scale;
  scale.i = ((int)n + 127) << 23;
  return t < -87.0f ? 0.0f : e * scale.f;
}

// out = x Phi(x): the exact GELU (numerics.gelu). out may be x (`omp simd` says elementwise
// aliasing is safe, without the runtime overlap checks that would send it down a scalar loop).
void gelu_f32(const float *x, float *out, i64 n, const float *pq) {
  LOAD_PQ(pq);
#pragma omp simd
  for (i64 i = 0; i < n; i++) {
    float v = x[i];
    out[i] = v * CDF(v);
  }
}

// out = g (Phi(x) + x phi(x)): GELU's gradient (numerics.gelu_grad). phi(x) = e^(-x^2/2) /
// sqrt(2 pi). out may be g or x.
void gelu_grad_f32(const float *g, const float *x, float *out, i64 n, const float *pq) {
  LOAD_PQ(pq);
#pragma omp simd
  for (i64 i = 0; i < n; i++) {
    float v = x[i];
    float pdf = exp_neg(-0.5f * v * v) * 0.3989422804014327f;
    out[i] = g[i] * (CDF(v) + v * pdf);
  }
}

// ---- convolutions at stride 1, on the grid ------------------------------------------------
// An image's padded input planes are stored flat, each `plane` = hp x wp floats. Output pixel
// (r, q) then reads, for kernel tap t at (i, j), flat position p + off[t] of each input plane,
// where p = r wp + q and off[t] = i dh wp + j dw: every tap is a shifted contiguous run, so
// vectors run along p straight across rows (ops/nn.py's NumPy path uses the same grid). The
// grid's positions with q >= OW are computed too and dropped (its wp - OW extra columns: 2 in
// 28 on the MNIST model). Each image is padded into a per-thread scratch buffer first and its
// outputs are cropped from one, so the grid never makes a pass over memory: an image's planes
// (~40-70 KB on the MNIST model) stay in the core's L2 cache while every tile reads them.
//
// Vectors of VL floats (GCC/clang vector extensions: AVX-512, AVX or SSE/NEON code as the CPU
// has); register tiles sized to the vector registers there are (32 with AVX-512, 16 with AVX).
#if defined(__AVX512F__)
#define VL 16
#define OB 8   // conv2d: 8 output channels x 3 vectors of pixels = 24 accumulators
#define NV 3
#define WO 2   // conv2d_weight: 2 output channels x 9 taps = 18 accumulators
#elif defined(__AVX__)
#define VL 8
#define OB 4
#define NV 3
#define WO 1
#else
#define VL 4
#define OB 4
#define NV 3
#define WO 1
#endif
#define WT 9  // taps per block: a 3x3 kernel in one
#define TILE (NV * VL)
typedef float vf __attribute__((vector_size(VL * 4)));
typedef int vi __attribute__((vector_size(VL * 4)));

static inline vf load_u(const float *p) {  // unaligned; compiles to one vector load
  vf v;
  __builtin_memcpy(&v, p, sizeof v);
  return v;
}
static inline void store_u(float *p, vf v) { __builtin_memcpy(p, &v, sizeof v); }
// Keeps a loaded vector in a register: GCC otherwise folds the load into every FMA that uses
// it, which made conv2d_weight's loop load each input vector WO times (load-bound, ~35% of
// the FMA peak).
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define IN_REGISTER(v) __asm__("" : "+v"(v))
#elif defined(__GNUC__) && defined(__aarch64__)
#define IN_REGISTER(v) __asm__("" : "+w"(v))
#else
#define IN_REGISTER(v) (void)0
#endif
static inline i64 round_up(i64 a, i64 b) { return (a + b - 1) / b * b; }

int conv_tile_pixels(void) { return TILE; }
int conv_tile_channels(void) { return OB; }
int conv_vector(void) { return VL; }

// planes [n][h][w] -> dst [n][hp][wp]: each plane's rows at (top, left) (both >= 0; what does
// not fit is cut), zeros around; dst's planes are `stride` floats apart.
static void pad_planes(const float *x, int n, int h, int w, float *dst, i64 stride, int hp,
                       int wp, int top, int left) {
  int cols = w < wp - left ? w : wp - left;
  for (int pl = 0; pl < n; pl++) {
    const float *src = x + (i64)pl * h * w;
    float *out = dst + pl * stride;
    for (int r = 0; r < hp; r++, out += wp) {
      int row = r - top;
      int q = 0;
      if (row >= 0 && row < h) {
        for (; q < left; q++) out[q] = 0.0f;
        for (const float *s = src + (i64)row * w - left; q < left + cols; q++) out[q] = s[q];
      }
      for (; q < wp; q++) out[q] = 0.0f;
    }
  }
}

// Floats of one output (or output gradient) plane on the grid: whole tiles of its positions,
// and room for all OH rows of wp (conv2d_weight pads the gradient's rows to wp).
static i64 grid_plane(int oh, int ow, int wp) {
  i64 tiles = round_up((i64)(oh - 1) * wp + ow, TILE), rows = round_up((i64)oh * wp, VL);
  return tiles > rows ? tiles : rows;
}

// Floats of scratch one thread needs for `block` images: their padded planes with the slack a
// tile reads past the last one, then (conv2d) the output grid or (conv2d_weight) their
// gradients on the grid, and a vector of slack that a gradient's last, masked load reads.
i64 conv2d_scratch(int c, int hp, int wp, int max_off, int o, int oh, int ow, int block) {
  return (i64)block * c * hp * wp + TILE + max_off + (i64)block * o * grid_plane(oh, ow, wp) + VL;
}

// How many images conv2d_weight pads at once: as many as fit in ~512 KB (half a typical L2),
// at most 8, so the partial sums are read and written once per block, not once per image
// (with 64 x 32 channels they are 1.2 MB, more than L2 holds).
int conv2d_weight_block(int c, int hp, int wp, int o, int oh, int ow) {
  i64 image = 4 * ((i64)c * hp * wp + (i64)o * grid_plane(oh, ow, wp));
  i64 block = (512 << 10) / (image > 0 ? image : 1);
  return block < 1 ? 1 : (block > 8 ? 8 : (int)block);
}

// out[img, o] = bias[o] + sum over c, t of w[o, c, t] x[img, c] shifted by off[t], for images
// [i0, i1) of x [N, C, H, W] padded by (top, left) into hp x wp planes; out [N, O, OH, OW].
// wpk: the weights packed [ceil(O / OB)][C][T][OB], bias [ceil(O / OB) * OB] (both zero past
// O), or bias NULL.
void conv2d_f32(const float *x, int c, int h, int w, int top, int left, int hp, int wp,
                const float *wpk, const float *bias, const int *off, int t, float *out, int o,
                int oh, int ow, int i0, int i1, float *scratch) {
  i64 plane = (i64)hp * wp, size = (i64)(oh - 1) * wp + ow, oplane = grid_plane(oh, ow, wp);
  float *xi = scratch, *grid = scratch + c * plane + TILE + off[t - 1];
  for (int img = i0; img < i1; img++) {
    pad_planes(x + (i64)img * c * h * w, c, h, w, xi, plane, hp, wp, top, left);
    for (int ob = 0; ob < o; ob += OB) {
      const float *wb = wpk + (i64)(ob / OB) * c * t * OB;
      int rows = o - ob < OB ? o - ob : OB;
      for (i64 p = 0; p < size; p += TILE) {
        vf acc[OB][NV];
        for (int r = 0; r < OB; r++)
          for (int v = 0; v < NV; v++) acc[r][v] = (vf){0} + (bias ? bias[ob + r] : 0.0f);
        const float *wk = wb;
        for (int ch = 0; ch < c; ch++) {
          const float *xc = xi + ch * plane + p;
          for (int k = 0; k < t; k++, wk += OB) {
            vf in[NV];
            for (int v = 0; v < NV; v++) in[v] = load_u(xc + off[k] + v * VL);
            for (int r = 0; r < OB; r++)
              for (int v = 0; v < NV; v++) acc[r][v] += wk[r] * in[v];
          }
        }
        for (int r = 0; r < rows; r++)
          for (int v = 0; v < NV; v++) store_u(grid + (ob + r) * oplane + p + v * VL, acc[r][v]);
      }
    }
    float *dst = out + (i64)img * o * oh * ow;  // crop: row r of the grid at r wp
    for (int pl = 0; pl < o; pl++)
      for (int r = 0; r < oh; r++)
        for (int q = 0; q < ow; q++)
          dst[((i64)pl * oh + r) * ow + q] = grid[pl * oplane + r * wp + q];
  }
}

// conv2d's weight gradient: part[o, c, t, :] += the VL lanes of sum over images [i0, i1) and
// grid positions p of g[img, o, p] x[img, c, p + off[t]], with x [N, C, H, W] padded as in
// conv2d_f32 and the output gradient g [N, O, OH, OW] put on the grid (zero at q >= OW), `block`
// images at a time (conv2d_weight_block). The caller sums the lanes (and the parts of its
// threads). The last, partial vector of each plane is masked on x as well as g, so a value past
// the plane (the next plane, the slack) never meets a zero of g (0 x inf would be NaN).
void conv2d_weight_f32(const float *g, int o, int oh, int ow, const float *x, int c, int h,
                       int w, int top, int left, int hp, int wp, const int *off, int t,
                       float *part, int i0, int i1, int block, float *scratch) {
  i64 plane = (i64)hp * wp, size = (i64)(oh - 1) * wp + ow, gplane = grid_plane(oh, ow, wp);
  float *xs = scratch, *gs = scratch + block * c * plane + TILE + off[t - 1];
  i64 full = size / VL * VL;
  vi lane;
  for (int l = 0; l < VL; l++) lane[l] = l;
  vi keep = lane < (vi){0} + (int)(size - full);
  for (int b0 = i0; b0 < i1; b0 += block) {
    int nb = i1 - b0 < block ? i1 - b0 : block;
    pad_planes(x + (i64)b0 * c * h * w, nb * c, h, w, xs, plane, hp, wp, top, left);
    pad_planes(g + (i64)b0 * o * oh * ow, nb * o, oh, ow, gs, gplane, oh, wp, 0, 0);
    for (int ch = 0; ch < c; ch++) {
      for (int ob = 0; ob < o; ob += WO) {
        for (int tb = 0; tb < t; tb += WT) {
          int offs[WT];
          for (int k = 0; k < WT; k++) offs[k] = off[tb + k < t ? tb + k : t - 1];
          vf acc[WO][WT];
          for (int r = 0; r < WO; r++)
            for (int k = 0; k < WT; k++) acc[r][k] = (vf){0};
          for (int b = 0; b < nb; b++) {
            const float *xc = xs + ((i64)b * c + ch) * plane;
            const float *gr[WO];
            for (int r = 0; r < WO; r++)  // rows past O read row O-1 again and are not stored
              gr[r] = gs + ((i64)b * o + (ob + r < o ? ob + r : o - 1)) * gplane;
            for (i64 p = 0; p < full; p += VL) {
              vf gv[WO];
              for (int r = 0; r < WO; r++) gv[r] = load_u(gr[r] + p);
              for (int k = 0; k < WT; k++) {
                vf xv = load_u(xc + offs[k] + p);
                IN_REGISTER(xv);
                for (int r = 0; r < WO; r++) acc[r][k] += gv[r] * xv;
              }
            }
            if (full < size) {
              vf gv[WO];
              for (int r = 0; r < WO; r++) gv[r] = (vf)((vi)load_u(gr[r] + full) & keep);
              for (int k = 0; k < WT; k++) {
                vf xv = (vf)((vi)load_u(xc + offs[k] + full) & keep);
                for (int r = 0; r < WO; r++) acc[r][k] += gv[r] * xv;
              }
            }
          }
          for (int r = 0; r < WO && ob + r < o; r++)
            for (int k = 0; k < WT && tb + k < t; k++) {
              float *dst = part + (((i64)(ob + r) * c + ch) * t + tb + k) * VL;
              store_u(dst, load_u(dst) + acc[r][k]);
            }
        }
      }
    }
  }
}

// ---- adam -----------------------------------------------------------------------------------
// Adam's update (ops/optim.py's arithmetic, op for op): x', m', v' from x, g and the moments m0,
// v0. w is 1 - beta1 below 0.5, else beta1 (torch's two-sided lerp); s: 1 - beta2, beta2,
// bc2_sqrt, eps, step. Out rows may not alias the inputs.
void adam_f32(const float *x, const float *g, const float *m0, const float *v0, float *nx,
              float *m, float *v, i64 n, float w, int small, const float *s) {
  float c2 = s[0], beta2 = s[1], bc2_sqrt = s[2], eps = s[3], step = s[4];
#pragma omp simd
  for (i64 i = 0; i < n; i++) {
    float d = (g[i] - m0[i]) * w, mi = small ? m0[i] + d : g[i] - d;
    float vi = g[i] * c2 * g[i] + v0[i] * beta2;
    m[i] = mi;
    v[i] = vi;
    nx[i] = mi * step / (__builtin_sqrtf(vi) / bc2_sqrt + eps) + x[i];
  }
}

// ---- relu and select ------------------------------------------------------------------------
// out = max(x, 0) with NaN kept, as NumPy's maximum (the relu op, 4x faster). out may be x.
void relu_f32(const float *x, float *out, i64 n) {
#pragma omp simd
  for (i64 i = 0; i < n; i++) out[i] = (x[i] > 0.0f || x[i] != x[i]) ? x[i] : 0.0f;
}

// out = mask ? value : x, elementwise (mask_where; ReLU's gradient is one). out may be x.
void mask_where_f32(const float *x, const unsigned char *mask, float value, float *out, i64 n) {
#pragma omp simd
  for (i64 i = 0; i < n; i++) out[i] = mask[i] ? value : x[i];
}

// ---- the thread pool ------------------------------------------------------------------------
// A job is part(args, i0, i1, p) over [0, n) cut into k parts: the caller runs part 0 (between
// pool_post and pool_join), worker w runs part w. The workers are threads Python starts
// (native/__init__.py), each calling pool_work with the GIL released; an idle worker spins for
// `spin` pauses (~1 ms) before it returns to Python to sleep on a lock, which pool_post says to
// release. Why spin: waking a sleeping thread took 35-100 us on a 2-vCPU VM, as long as half of
// a training step's GEMM, and Python's pool (futures, the GIL) cost another ~50 us; back-to-back
// ops find a spinning worker at once (a job's hand-off ~1 us). No libc (see the top): GCC's
// atomic builtins and the CPU's pause hint only.
typedef void (*part_fn)(const i64 *args, i64 i0, i64 i1, i64 part);
#define MAX_WORKERS 8
enum { AWAKE = 0, ASLEEP = 1 };
static struct {
  i64 gen;                // the last job's number
  i64 todo[MAX_WORKERS];  // the job each worker has a part in (negated once it is taken)
  i64 state[MAX_WORKERS]; // AWAKE or ASLEEP (returned to Python)
  i64 pending;            // the workers' parts not done yet
  i64 busy;               // a job is out (one at a time; a second caller runs its own inline)
  i64 spin;
  part_fn fn;
  const i64 *args;
  i64 n, k;
} pool = {.spin = 100000};

static inline void relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#else
  __asm__ volatile("" ::: "memory");  // (a loop of pauses stays a loop)
#endif
}

void pool_set_spin(i64 pauses) { pool.spin = pauses; }
void pool_pause(i64 pauses) {  // (to time a pause: the spin is set in seconds)
  for (i64 i = 0; i < pauses; i++) relax();
}
void pool_reset(void) {  // after fork(): the child has none of the workers
  for (int w = 0; w < MAX_WORKERS; w++) pool.todo[w] = pool.state[w] = 0;
  pool.gen = pool.pending = pool.busy = 0;
}

// Part w of job g is run by whoever takes it first: its worker, or the caller once its own part
// is done (a worker the OS has not scheduled yet, on a busy machine, then costs no wait).
static int claim(i64 w, i64 g) {
  return __atomic_compare_exchange_n(&pool.todo[w], &g, -g, 0, __ATOMIC_SEQ_CST,
                                     __ATOMIC_SEQ_CST);
}
static void run_part(i64 w) {
  pool.fn(pool.args, pool.n * w / pool.k, pool.n * (w + 1) / pool.k, w);
  __atomic_fetch_sub(&pool.pending, 1, __ATOMIC_SEQ_CST);
}

// worker w (1 ..): runs its parts of the jobs after job `seen` until none came for pool.spin
// pauses; returns the last job it saw (its next call's `seen`), and Python then sleeps.
i64 pool_work(i64 w, i64 seen) {
  for (i64 idle = 0;; relax()) {
    i64 g = __atomic_load_n(&pool.gen, __ATOMIC_SEQ_CST);
    if (g == seen) {
      if (++idle < pool.spin) continue;
      __atomic_store_n(&pool.state[w], ASLEEP, __ATOMIC_SEQ_CST);
      if (__atomic_load_n(&pool.gen, __ATOMIC_SEQ_CST) == seen) return seen;
      __atomic_store_n(&pool.state[w], AWAKE, __ATOMIC_SEQ_CST);  // a job came meanwhile
      continue;
    }
    seen = g;
    idle = 0;
    // (a job this worker has no part in can be followed by one it has: it is seen next round)
    if (claim(w, g)) run_part(w);
  }
}

// Hands parts 1 .. k-1 of a job to the workers: the bit mask of those asleep, whom the caller
// wakes, or -1 when another caller's job is out (then run it with pool_inline).
i64 pool_post(part_fn fn, const i64 *args, i64 n, i64 k) {
  i64 free = 0;
  if (k > MAX_WORKERS || !__atomic_compare_exchange_n(&pool.busy, &free, 1, 0,
                                                      __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST))
    return -1;
  pool.fn = fn, pool.args = args, pool.n = n, pool.k = k;
  i64 g = pool.gen + 1, wake = 0;
  __atomic_store_n(&pool.pending, k - 1, __ATOMIC_SEQ_CST);
  for (i64 w = 1; w < k; w++) __atomic_store_n(&pool.todo[w], g, __ATOMIC_SEQ_CST);
  __atomic_store_n(&pool.gen, g, __ATOMIC_SEQ_CST);
  for (i64 w = 1; w < k; w++)
    if (__atomic_exchange_n(&pool.state[w], AWAKE, __ATOMIC_SEQ_CST) == ASLEEP) wake |= 1 << w;
  return wake;
}

void pool_join(void) {  // runs part 0, then any part no worker took yet, and waits for the rest
  pool.fn(pool.args, 0, pool.n / pool.k, 0);
  for (i64 w = 1; w < pool.k; w++)
    if (claim(w, pool.gen)) run_part(w);
  while (__atomic_load_n(&pool.pending, __ATOMIC_SEQ_CST)) relax();
  __atomic_store_n(&pool.busy, 0, __ATOMIC_SEQ_CST);
}

void pool_inline(part_fn fn, const i64 *args, i64 n, i64 k) {
  for (i64 p = 0; p < k; p++) fn(args, n * p / k, n * (p + 1) / k, p);
}

// ---- the parts the pool runs ----------------------------------------------------------------
// conv2d_f32's arguments 0-15, then the scratch of part 0 and the floats between two parts'.
void conv2d_part(const i64 *a, i64 i0, i64 i1, i64 p) {
  conv2d_f32((const float *)a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], (const float *)a[8],
             (const float *)a[9], (const int *)a[10], a[11], (float *)a[12], a[13], a[14], a[15],
             i0, i1, (float *)a[16] + p * a[17]);
}

// conv2d_weight_f32's arguments 0-13, the sums of part 0 and the floats between two parts',
// the block, part 0's scratch and the floats between two parts'.
void conv2d_weight_part(const i64 *a, i64 i0, i64 i1, i64 p) {
  conv2d_weight_f32((const float *)a[0], a[1], a[2], a[3], (const float *)a[4], a[5], a[6], a[7],
                    a[8], a[9], a[10], a[11], (const int *)a[12], a[13],
                    (float *)a[14] + p * a[15], i0, i1, a[16], (float *)a[17] + p * a[18]);
}

// A fused kernel (fused.py) on 64-element chunks [i0, i1): its pointer, the size, then its own
// arguments after (start, stop).
typedef void (*fused_fn)(i64, i64, int, const i64 *, const i64 *, void *const *, const char *);
void fused_part(const i64 *a, i64 i0, i64 i1, i64 p) {
  (void)p;
  i64 stop = i1 * 64 < a[1] ? i1 * 64 : a[1];
  ((fused_fn)a[0])(i0 * 64, stop, a[2], (const i64 *)a[3], (const i64 *)a[4],
                   (void *const *)a[5], (const char *)a[6]);
}

// C = A @ B through the BLAS's cblas_sgemm/dgemm (a[0]; a[1]: bit 0 double, bit 1 64-bit
// ints), by parts along a[2]: 0 the batch, 1 the rows of A, 2 the columns of B. a[3..5]: A, B,
// C (C-contiguous [batch, m, n]); a[6..8]: m, n, k; a[9..12]: A transposed (0/1) and its
// leading dimension, B's; a[13], a[14]: each batch item's offset in A, in B (elements: a
// broadcast repeats one); a[15]: the batch.
typedef void (*sgemm32)(int, int, int, int, int, int, float, const float *, int, const float *,
                        int, float, float *, int);
typedef void (*sgemm64)(int, int, int, i64, i64, i64, float, const float *, i64, const float *,
                        i64, float, float *, i64);
typedef void (*dgemm32)(int, int, int, int, int, int, double, const double *, int,
                        const double *, int, double, double *, int);
typedef void (*dgemm64)(int, int, int, i64, i64, i64, double, const double *, i64,
                        const double *, i64, double, double *, i64);
void gemm_part(const i64 *a, i64 i0, i64 i1, i64 p) {
  (void)p;
  i64 axis = a[2], m = a[6], n = a[7], k = a[8], ta = a[9], lda = a[10], tb = a[11],
      ldb = a[12];
  i64 b0 = axis == 0 ? i0 : 0, b1 = axis == 0 ? i1 : a[15];
  i64 r0 = axis == 1 ? i0 : 0, r1 = axis == 1 ? i1 : m;
  i64 c0 = axis == 2 ? i0 : 0, c1 = axis == 2 ? i1 : n;
  i64 size = a[1] & 1 ? 8 : 4;
  int order = 101, trans_a = ta ? 112 : 111, trans_b = tb ? 112 : 111;  // CBLAS' enums
  if (r1 <= r0 || c1 <= c0) return;
  for (i64 bi = b0; bi < b1; bi++) {
    const i64 *at = (const i64 *)a[13], *bt = (const i64 *)a[14];
    const char *A = (const char *)a[3] + size * (at[bi] + r0 * (ta ? 1 : lda));
    const char *B = (const char *)a[4] + size * (bt[bi] + c0 * (tb ? ldb : 1));
    char *C = (char *)a[5] + size * ((bi * m + r0) * n + c0);
    i64 rows = r1 - r0, cols = c1 - c0;
    switch (a[1]) {
    case 0: ((sgemm32)a[0])(order, trans_a, trans_b, rows, cols, k, 1.0f, (const float *)A, lda,
                            (const float *)B, ldb, 0.0f, (float *)C, n); break;
    case 1: ((dgemm32)a[0])(order, trans_a, trans_b, rows, cols, k, 1.0, (const double *)A, lda,
                            (const double *)B, ldb, 0.0, (double *)C, n); break;
    case 2: ((sgemm64)a[0])(order, trans_a, trans_b, rows, cols, k, 1.0f, (const float *)A, lda,
                            (const float *)B, ldb, 0.0f, (float *)C, n); break;
    default: ((dgemm64)a[0])(order, trans_a, trans_b, rows, cols, k, 1.0, (const double *)A,
                             lda, (const double *)B, ldb, 0.0, (double *)C, n);
    }
  }
}
