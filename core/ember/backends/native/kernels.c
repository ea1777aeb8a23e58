// ember's native CPU kernels: elementwise chains that NumPy runs as many array passes, as one
// pass each, on NumPy's own buffers (zero copy). GELU and its gradient are the first: NumPy
// computes them in ~14 and ~9 passes (ops/numerics.py), this in one, ~6x faster.
//
// Compiled on first use by core/ember/backends/native (the host's C compiler, -O3, tuned to
// this CPU; the .so is cached) and called through ctypes; CPython only (inside Pyodide NdArray
// has its WebAssembly kernels instead). The loops are plain C that the compiler vectorizes
// (`omp simd`: out may be x itself, which is safe elementwise, and the pragma says so without
// the runtime overlap checks that would send that case down a scalar loop). No headers and no
// libc calls, so building needs a compiler and a linker only (-nostdlib); expf is below.
//
// Results follow numerics.py's float32 formulas, so NumPy's path and this one agree to a few
// ulp (tests/backends/test_native.py).

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

// out = x Phi(x): the exact GELU (numerics.gelu).
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
