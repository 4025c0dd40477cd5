/* specviz's native kernels for the few-row steps of decoding (AR, drafting, short verifications): the
   matrix-vector product that reads the weights, and the small per-layer steps around it fused into one call
   each (RMSNorm, RoPE, attention over the cache, SiLU-gate), which torch would run as 4-12 ops apiece.

   specviz_gemv:

   y (rows, out) = x (rows, in) @ W^T (+ bias), W row-major (out, in) as nn.Linear holds it, fp32.

   Each output is the dot product of one contiguous weight row with each input row, so the weights stream
   through memory once, front to back, whatever the row count; the inputs (a few KB) stay in L1. Outputs are
   split between the threads in contiguous ranges (OpenMP, torch's own runtime: the library is linked against
   the libgomp torch has already loaded). GCC vector extensions give AVX-512 on hosts that have it and two or
   four narrower registers elsewhere (compiled here with -march=native, per host).

   Every row is computed by the same sequence of instructions whatever `rows` is: a row's result does not
   depend on which other rows share the call (tests/test_native.py). */
#include <math.h>
#include <stddef.h>
#ifdef _OPENMP
#include <omp.h>
#endif

typedef float v16 __attribute__((vector_size(64), aligned(4)));

static inline float hsum(v16 v) {
  typedef float v8 __attribute__((vector_size(32)));
  typedef float v4 __attribute__((vector_size(16)));
  v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

/* One weight row w (in) against R input rows (R <= 4, row stride `in`): y[r * out] = w . x[r]. Two
   accumulators per row, each its own variable (an array would live on the stack: a store per FMA). */
#define DOT_ROWS(R)                                                                                   \
  static void dot##R(const float *restrict w, const float *restrict x, float *restrict y, long in,   \
                     long out, int acc) {                                                             \
    v16 a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0};               \
    const float *x0 = x, *x1 = x + in, *x2 = x + 2 * in, *x3 = x + 3 * in;                            \
    long i = 0;                                                                                       \
    for (; i + 32 <= in; i += 32) {                                                                   \
      v16 wa = *(const v16 *)(w + i), wb = *(const v16 *)(w + i + 16);                                \
      a0 += wa * *(const v16 *)(x0 + i), b0 += wb * *(const v16 *)(x0 + i + 16);                      \
      if (R > 1) a1 += wa * *(const v16 *)(x1 + i), b1 += wb * *(const v16 *)(x1 + i + 16);           \
      if (R > 2) a2 += wa * *(const v16 *)(x2 + i), b2 += wb * *(const v16 *)(x2 + i + 16);           \
      if (R > 3) a3 += wa * *(const v16 *)(x3 + i), b3 += wb * *(const v16 *)(x3 + i + 16);           \
    }                                                                                                 \
    v16 sums[4] = {a0 + b0, a1 + b1, a2 + b2, a3 + b3};                                               \
    for (int r = 0; r < R; r++) {                                                                     \
      float s = hsum(sums[r]);                                                                        \
      for (long j = i; j < in; j++) s += w[j] * x[r * in + j];                                        \
      y[r * out] = acc ? y[r * out] + s : s;                                                          \
    }                                                                                                 \
  }
DOT_ROWS(1)
DOT_ROWS(2)
DOT_ROWS(3)
DOT_ROWS(4)

typedef void (*dot_fn)(const float *, const float *, float *, long, long, int);
static const dot_fn DOT[5] = {0, dot1, dot2, dot3, dot4};

/* Inside a parallel region, the outputs split between the team: y[r, o] (=, or += when acc) w[o] . x[r]
   (+ bias[o]) for every row r. */
static void matvec_team(const float *w, const float *bias, const float *x, float *y, long in, long out, long rows,
                        int acc) {
#pragma omp for schedule(static)
  for (long o = 0; o < out; o++) {
    for (long r0 = 0; r0 < rows; r0 += 4) {
      long n = rows - r0 < 4 ? rows - r0 : 4;
      DOT[n](w + o * in, x + r0 * in, y + r0 * out + o, in, out, acc);
    }
    if (bias)
      for (long r = 0; r < rows; r++) y[r * out + o] += bias[o];
  }
}

void specviz_gemv(const float *w, const float *x, const float *bias, float *y, long in, long out, long rows,
                  int threads) {
#pragma omp parallel num_threads(threads)
  matvec_team(w, bias, x, y, in, out, rows, 0);
}

/* RMSNorm as transformers' LlamaRMSNorm in fp32: y = w * (x * rsqrt(mean(x^2) + eps)), per row of `dim`. */
static void rmsnorm(const float *x, const float *w, float *y, long rows, long dim, float eps) {
  for (long r = 0; r < rows; r++) {
    const float *xr = x + r * dim;
    float *yr = y + r * dim;
    v16 acc = (v16){0};
    long i = 0;
    for (; i + 16 <= dim; i += 16) {
      v16 v = *(const v16 *)(xr + i);
      acc += v * v;
    }
    float ss = hsum(acc);
    for (; i < dim; i++) ss += xr[i] * xr[i];
    float inv = 1.0f / sqrtf(ss / (float)dim + eps);
    for (i = 0; i < dim; i++) yr[i] = w[i] * (xr[i] * inv);
  }
}

/* Rotary embedding in place on `heads` heads of `hd` at the start of each row of x (row stride `stride`):
   x1, x2 the halves, cos/sin (rows, hd): x1' = x1 cos - x2 sin, x2' = x2 cos + x1 sin (transformers'
   q * cos + rotate_half(q) * sin). */
static void rope(float *x, long rows, long stride, long heads, long hd, const float *cos, const float *sin) {
  long half = hd / 2;
  for (long t = 0; t < rows; t++) {
    const float *c = cos + t * hd, *s = sin + t * hd;
    for (long h = 0; h < heads; h++) {
      float *p = x + t * stride + h * hd;
      for (long i = 0; i < half; i++) {
        float a = p[i], b = p[i + half];
        p[i] = a * c[i] - b * s[i];
        p[i + half] = b * c[i + half] + a * s[i + half];
      }
    }
  }
}

/* y (rows, inter) = silu(gate) * up, gate and up the two halves of each row of gu (rows, 2 inter). */
static void silu_mul_team(const float *gu, float *y, long rows, long inter) {
#pragma omp for schedule(static)
  for (long k = 0; k < rows * inter; k++) {
    long r = k / inter, i = k % inter;
    float g = gu[r * 2 * inter + i];
    y[k] = g / (1.0f + expf(-g)) * gu[r * 2 * inter + inter + i];
  }
}

/* Attention of T queries over L cached keys (the new tokens' included), grouped-query heads, softmax in fp32.
   q: query t, head h at q + t * q_stride + h * hd. k, v: key j of kv head g at k + g * kv_stride + j * hd.
   mask (T, L) bytes, nonzero = may attend; NULL = causal with the new tokens at slots start..start+T-1.
   out (T, nh * hd): what the o projection reads. scratch: threads * L floats (the scores). */
static void attention_team(const float *q, long q_stride, const float *k, const float *v, long kv_stride,
                           const unsigned char *mask, long start, float *out, float *scratch, long T, long L,
                           long nh, long nkv, long hd, float scale) {
  long group = nh / nkv;
#pragma omp for schedule(static)
  for (long th = 0; th < T * nh; th++) {
    long t = th / nh, h = th % nh;
    const float *qv = q + t * q_stride + h * hd;
    const float *K = k + (h / group) * kv_stride, *V = v + (h / group) * kv_stride;
#ifdef _OPENMP
    float *s = scratch + (long)omp_get_thread_num() * L;
#else
    float *s = scratch;
#endif
    long limit = mask ? L : start + t + 1;
    float m = -INFINITY;
    for (long j = 0; j < limit; j++) {
      if (mask && !mask[t * L + j]) {
        s[j] = -INFINITY;
        continue;
      }
      const float *kj = K + j * hd;
      float d = 0;
      long i = 0;
      if (hd % 16 == 0) {
        v16 acc = (v16){0};
        for (; i < hd; i += 16) acc += *(const v16 *)(qv + i) * *(const v16 *)(kj + i);
        d = hsum(acc);
      }
      for (; i < hd; i++) d += qv[i] * kj[i];
      s[j] = d * scale;
      if (s[j] > m) m = s[j];
    }
    float *o = out + t * nh * hd + h * hd, sum = 0;
    for (long i = 0; i < hd; i++) o[i] = 0;
    for (long j = 0; j < limit; j++) {
      if (s[j] == -INFINITY) continue;
      float p = expf(s[j] - m);
      sum += p;
      const float *vj = V + j * hd;
      for (long i = 0; i < hd; i++) o[i] += p * vj[i];
    }
    for (long i = 0; i < hd; i++) o[i] /= sum;
  }
}

void specviz_rmsnorm(const float *x, const float *w, float *y, long rows, long dim, float eps) {
  rmsnorm(x, w, y, rows, dim, eps);
}

void specviz_rope(float *x, long rows, long stride, long heads, long hd, const float *cos, const float *sin) {
  rope(x, rows, stride, heads, hd, cos, sin);
}

void specviz_silu_mul(const float *gu, float *y, long rows, long inter, int threads) {
#pragma omp parallel num_threads(threads)
  silu_mul_team(gu, y, rows, inter);
}

void specviz_attention(const float *q, long q_stride, const float *k, const float *v, long kv_stride,
                       const unsigned char *mask, long start, float *out, float *scratch, long T, long L,
                       long nh, long nkv, long hd, float scale, int threads) {
#pragma omp parallel num_threads(threads)
  attention_team(q, q_stride, k, v, kv_stride, mask, start, out, scratch, T, L, nh, nkv, hd, scale);
}

/* A decoder layer's first half, in one parallel region: h = RMSNorm(x); qkv = h @ W_qkv.T (+ b); RoPE on its
   q and k heads (`rotated` heads of hd at the start of each row). The caller writes k and v into the cache. */
void specviz_layer_qkv(const float *x, float *h, float *qkv, long T, long H, long width, const float *w_in,
                       float eps, const float *w_qkv, const float *b_qkv, long rotated, long hd, const float *cos,
                       const float *sin, int threads) {
#pragma omp parallel num_threads(threads)
  {
#pragma omp single
    rmsnorm(x, w_in, h, T, H, eps);
    matvec_team(w_qkv, b_qkv, h, qkv, H, width, T, 0);
#pragma omp single
    rope(qkv, T, width, rotated, hd, cos, sin);
  }
}

/* The rest of the layer, in one parallel region, x (T, H) updated in place: att = attention(q over the
   cache's L keys); x += att @ W_o.T; h = RMSNorm(x); gu = h @ W_gu.T; act = silu(gate) * up;
   x += act @ W_down.T. ws: T (nh hd + H + 3 inter) + threads L floats. */
void specviz_layer_rest(float *x, const float *qkv, long width, const float *k, const float *v, long kv_stride,
                        long L, const unsigned char *mask, long start, long T, long H, long nh, long nkv, long hd,
                        long inter, const float *w_o, const float *w_post, float eps, const float *w_gu,
                        const float *w_down, float *ws, float scale, int threads) {
  float *att = ws, *h = att + T * nh * hd, *gu = h + T * H, *act = gu + T * 2 * inter, *scores = act + T * inter;
#pragma omp parallel num_threads(threads)
  {
    attention_team(qkv, width, k, v, kv_stride, mask, start, att, scores, T, L, nh, nkv, hd, scale);
    matvec_team(w_o, 0, att, x, nh * hd, H, T, 1);
#pragma omp single
    rmsnorm(x, w_post, h, T, H, eps);
    matvec_team(w_gu, 0, h, gu, H, 2 * inter, T, 0);
    silu_mul_team(gu, act, T, inter);
    matvec_team(w_down, 0, act, x, inter, H, T, 1);
  }
}
