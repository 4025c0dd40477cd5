/* specviz's matrix-vector kernel for the few-row steps of decoding (AR, drafting, short verifications).

   y (rows, out) = x (rows, in) @ W^T (+ bias), W row-major (out, in) as nn.Linear holds it, fp32.

   Each output is the dot product of one contiguous weight row with each input row, so the weights stream
   through memory once, front to back, whatever the row count; the inputs (a few KB) stay in L1. Outputs are
   split between the threads in contiguous ranges (OpenMP, torch's own runtime: the library is linked against
   the libgomp torch has already loaded). GCC vector extensions give AVX-512 on hosts that have it and two or
   four narrower registers elsewhere (compiled here with -march=native, per host).

   Every row is computed by the same sequence of instructions whatever `rows` is: a row's result does not
   depend on which other rows share the call (tests/test_native.py). */
#include <stddef.h>

typedef float v16 __attribute__((vector_size(64), aligned(4)));

static inline float hsum(v16 v) {
  typedef float v8 __attribute__((vector_size(32)));
  typedef float v4 __attribute__((vector_size(16)));
  v8 a = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) +
         __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
  v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
  return (b[0] + b[2]) + (b[1] + b[3]);
}

/* One weight row w (in) against R input rows (R <= 4, row stride `in`): y[r * out] = w . x[r]. */
#define DOT_ROWS(R)                                                                                 \
  static void dot##R(const float *restrict w, const float *restrict x, float *restrict y, long in, \
                     long out) {                                                                    \
    v16 a0[R], a1[R];                                                                               \
    for (int r = 0; r < R; r++) a0[r] = a1[r] = (v16){0};                                           \
    long i = 0;                                                                                     \
    for (; i + 32 <= in; i += 32) {                                                                 \
      v16 wa = *(const v16 *)(w + i), wb = *(const v16 *)(w + i + 16);                              \
      for (int r = 0; r < R; r++) {                                                                 \
        a0[r] += wa * *(const v16 *)(x + r * in + i);                                               \
        a1[r] += wb * *(const v16 *)(x + r * in + i + 16);                                          \
      }                                                                                             \
    }                                                                                               \
    for (int r = 0; r < R; r++) {                                                                   \
      float s = hsum(a0[r] + a1[r]);                                                                \
      for (long j = i; j < in; j++) s += w[j] * x[r * in + j];                                      \
      y[r * out] = s;                                                                               \
    }                                                                                               \
  }
DOT_ROWS(1)
DOT_ROWS(2)
DOT_ROWS(3)
DOT_ROWS(4)

typedef void (*dot_fn)(const float *, const float *, float *, long, long);
static const dot_fn DOT[5] = {0, dot1, dot2, dot3, dot4};

void specviz_gemv(const float *w, const float *x, const float *bias, float *y, long in, long out, long rows,
                  int threads) {
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long o = 0; o < out; o++) {
    const float *row = w + o * in;
    for (long r0 = 0; r0 < rows; r0 += 4) {
      long n = rows - r0 < 4 ? rows - r0 : 4;
      DOT[n](row, x + r0 * in, y + r0 * out + o, in, out);
    }
    if (bias)
      for (long r = 0; r < rows; r++) y[r * out + o] += bias[o];
  }
}
