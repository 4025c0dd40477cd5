/* specviz's native kernels for the few-row steps of decoding (AR, drafting, short verifications): the
   matrix-vector product that reads the weights, and the small per-layer steps around it fused into one call
   each (RMSNorm, RoPE, attention over the cache, SiLU-gate), which torch would run as 4-12 ops apiece.

   specviz_gemv: y (rows, out) = x (rows, in) @ W^T (+ bias), fp32, W held in panels of PW outputs: panel p is
   the (in, PW) block W[p PW : (p + 1) PW, :]^T, contiguous, the last one zero-padded (native.pack). A panel
   streams through memory front to back once for up to 8 input rows: per input position, PW weights are loaded
   into registers once and each row's input, broadcast, is multiplied into that row's PW accumulators (no
   horizontal sums; 2 loads per 16 FMAs at 8 rows). Panels are split between the threads (OpenMP, torch's own
   runtime: the library is linked against the libgomp torch has already loaded). GCC vector extensions at the
   build's widest vector (AVX-512, AVX2/FMA, SSE, NEON, or plain C: below), chosen when it is compiled.

   Every row is computed by the same sequence of instructions whatever `rows` is: a row's result does not
   depend on which other rows share the call (tests/test_native.py). */
#include <math.h>
#include <stddef.h>
#if !defined(SPECVIZ_PLAIN_C) && defined(__x86_64__)
#include <immintrin.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

/* The vector width is the widest the compiler targets (-march / -mcpu of the build, native.py): VW floats a
   vector, a panel two vectors wide, RMAX input rows against a panel at once (two accumulators a row and the two
   weight vectors fit the register file: 8 rows of 32 zmm, 6 of 16 ymm or xmm, 8 of NEON's 32). KEEP holds the two
   weight vectors in registers where the target has a register for them (an empty asm; GCC would reload them as
   an operand of every FMA); the plain C build (any other target, or -DSPECVIZ_PLAIN_C) has no asm at all. */
#if defined(SPECVIZ_PLAIN_C) /* any target: no vector width assumed (tests/test_native.py builds it too) */
#define VW 4
#define RMAX 4
#define LEVEL "generic"
#define KEEP(a, b) ((void)0)
#elif defined(__AVX512F__)
#define VW 16
#define RMAX 8
#define LEVEL "avx512"
#define KEEP(a, b) __asm__("" : "+v"(a), "+v"(b))
#elif defined(__AVX2__) && defined(__FMA__)
#define VW 8
#define RMAX 6
#define LEVEL "avx2"
#define KEEP(a, b) __asm__("" : "+v"(a), "+v"(b))
#elif defined(__x86_64__) && defined(__SSE2__)
#define VW 4
#define RMAX 6
#define LEVEL "sse"
#define KEEP(a, b) __asm__("" : "+x"(a), "+x"(b))
#elif defined(__ARM_NEON)
#define VW 4
#define RMAX 8
#define LEVEL "neon"
#define KEEP(a, b) __asm__("" : "+w"(a), "+w"(b))
#else
#define VW 4
#define RMAX 4
#define LEVEL "generic"
#define KEEP(a, b) ((void)0)
#endif

typedef float vf __attribute__((vector_size(VW * 4), aligned(4)));
typedef int vi __attribute__((vector_size(VW * 4)));

/* The lanes' sum, halving: (v[i] + v[i + VW/2]) and so on down to one (the same order at every width). */
static inline float hsum(vf v) {
  float t[VW];
  for (int i = 0; i < VW; i++) t[i] = v[i];
  for (int w = VW / 2; w >= 1; w /= 2)
    for (int i = 0; i < w; i++) t[i] += t[i + w];
  return t[0];
}

#define PW (2 * VW) /* outputs per panel: two vectors */

/* The weights SPECVIZ_PREFETCH bytes ahead of the loads are asked for now (a panel's PW floats a cache line or two;
   the panels of a thread lie one after another, so the distance runs on into its next panel). Without it a pass of
   6-8 rows waits on memory: the loads in flight are only those the core's reorder window holds (~1 KiB ahead at 6
   rows), and the time of the FMAs adds to the time of the reads instead of hiding under it (AMD EPYC, 1 thread: 6
   rows 2.25x the memory floor at AVX2 without, 1.12x with 8 KiB; benchmarks/results/native-prefetch.md, where
   `python -m benchmarks forward prefetch` measures the distances side by side). 0: no prefetch. */
#ifndef SPECVIZ_PREFETCH
#define SPECVIZ_PREFETCH 8192
#endif
#if SPECVIZ_PREFETCH == 0
#define PREFETCH(a) ((void)0)
#elif PW * 4 > 64 /* a panel row spans two 64-byte lines */
#define PREFETCH(a)                                                    \
  (__builtin_prefetch((const char *)(a) + SPECVIZ_PREFETCH, 0, 3),    \
   __builtin_prefetch((const char *)(a) + SPECVIZ_PREFETCH + 64, 0, 3))
#else
#define PREFETCH(a) __builtin_prefetch((const char *)(a) + SPECVIZ_PREFETCH, 0, 3)
#endif

/* One panel p (in, PW) against R <= RMAX input rows (stride in): y[r * out + k] (=, or += when acc) for the
   panel's nvalid outputs k. Each accumulator its own variable (an array lives on the stack: a store per FMA). */
#define PANEL_ROWS(R)                                                                                 \
  static void panel##R(const float *restrict p, const float *restrict x, float *restrict y, long in, \
                       long out, long nvalid, int acc) {                                              \
    vf a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0};                \
    vf a4 = {0}, b4 = {0}, a5 = {0}, b5 = {0}, a6 = {0}, b6 = {0}, a7 = {0}, b7 = {0};                \
    for (long i = 0; i < in; i++) {                                                                   \
      PREFETCH(p + i * PW);                                                                           \
      vf wa = *(const vf *)(p + i * PW), wb = *(const vf *)(p + i * PW + VW);                         \
      KEEP(wa, wb);                                                                                   \
      float s = x[i];                                                                                 \
      a0 += wa * s, b0 += wb * s;                                                                     \
      if (R > 1) s = x[in + i], a1 += wa * s, b1 += wb * s;                                           \
      if (R > 2) s = x[2 * in + i], a2 += wa * s, b2 += wb * s;                                       \
      if (R > 3) s = x[3 * in + i], a3 += wa * s, b3 += wb * s;                                       \
      if (R > 4) s = x[4 * in + i], a4 += wa * s, b4 += wb * s;                                       \
      if (R > 5) s = x[5 * in + i], a5 += wa * s, b5 += wb * s;                                       \
      if (R > 6) s = x[6 * in + i], a6 += wa * s, b6 += wb * s;                                       \
      if (R > 7) s = x[7 * in + i], a7 += wa * s, b7 += wb * s;                                       \
    }                                                                                                 \
    vf res[16] = {a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5, a6, b6, a7, b7};                    \
    for (int r = 0; r < R; r++)                                                                       \
      for (long k = 0; k < nvalid; k++) {                                                             \
        float v = res[2 * r + k / VW][k % VW];                                                        \
        y[r * out + k] = acc ? y[r * out + k] + v : v;                                                \
      }                                                                                               \
  }
PANEL_ROWS(1)
PANEL_ROWS(2)
PANEL_ROWS(3)
PANEL_ROWS(4)
#if RMAX >= 6
PANEL_ROWS(5)
PANEL_ROWS(6)
#endif
#if RMAX >= 8
PANEL_ROWS(7)
PANEL_ROWS(8)
#endif

typedef void (*panel_fn)(const float *, const float *, float *, long, long, long, int);
static const panel_fn PANEL[RMAX + 1] = {0, panel1, panel2, panel3, panel4,
#if RMAX >= 6
                                         panel5, panel6,
#endif
#if RMAX >= 8
                                         panel7, panel8
#endif
};


/* ---- GGUF blocks: the weights as the model file ships them, rebuilt in registers ------------------------------

   The block formats of the embedded models (ggml's; gguf-py's de-quantizer is the reference): Q8_0 (w = d q),
   Q4_1 (w = d q + m), Q5_0 (w = d q, q - 16 signed), Q4_K (w = (d sc) q - dmin m) and Q6_K (w = (d sc) q, q - 32
   signed). Each weight is rebuilt with the de-quantizer's own arithmetic in the order it does it, rounding where it
   rounds (d q is exact in fp32 for Q8_0, Q4_1, Q5_0 and Q4_K, so their one rounding, if any, is the sum's, the same
   value as an fma; Q6_K's (d sc) q rounds
   once, as gguf-py's product does), then multiplied into the accumulators exactly as the fp32 panels' weights
   are: every product and every sum equals the fp32 kernel's on the de-quantized matrix, bit for bit.

   The blocks are regrouped by panel (native_blocks.py packs them; no weight changes): a panel's PW outputs and a
   block's inputs, the scales of the PW outputs first (fp16 as shipped), then per input the PW outputs' quants, so
   one input's PW weights are one load. Per block of 32 inputs (Q8_0, Q4_1) or super-block of 256 (Q4_K, Q6_K):
     Q8_0  d[PW] fp16 | 32 x PW int8 q                                              34 PW bytes
     Q4_1  d[PW] m[PW] fp16 | 32 x VW bytes: output j in the low nibble, j + VW high  20 PW bytes
     Q5_0  d[PW] fp16 | 32 x VW bytes of low nibbles as Q4_1's | 8 x VW bytes of the fifth bits (byte j of
           group g: output j of input 4g + t in bit 2t, output j + VW in bit 2t + 1)        22 PW bytes
     Q4_K  d[PW] dmin[PW] fp16 | sc[8][PW] m[8][PW] (6-bit, unpacked) | 256 x VW nibbles  148 PW bytes
     Q6_K  d[PW] fp16 | sc[16][PW] int8 | per 16 inputs: 16 x VW nibbles (low 4 bits), 8 x VW bytes of the high
           2 bits (byte j of pair k: output j of input 2k, j + VW of 2k, j of 2k + 1, j + VW of 2k + 1, 2 bits each)
                                                                                     210 PW bytes
   The same bytes as the file's blocks (Q4_K: 4 more per 256 weights, its scales unpacked from 6 bits). */
enum { FMT_F32 = 0, FMT_Q8_0 = 1, FMT_Q4_1 = 2, FMT_Q4_K = 3, FMT_Q6_K = 4, FMT_Q5_0 = 5 };

/* A panel's bytes for `in` inputs, and the inputs a block of the format spans (in is a multiple of it). */
static long fmt_block(int fmt) { return fmt == FMT_Q4_K || fmt == FMT_Q6_K ? 256 : fmt == FMT_F32 ? 1 : 32; }
static long fmt_block_bytes(int fmt) {
  switch (fmt) {
  case FMT_Q8_0: return 34 * PW;
  case FMT_Q4_1: return 20 * PW;
  case FMT_Q5_0: return 22 * PW;
  case FMT_Q4_K: return 148 * PW;
  case FMT_Q6_K: return 210 * PW;
  default: return 4 * PW;
  }
}
static long panel_bytes(int fmt, long in) { return in / fmt_block(fmt) * fmt_block_bytes(fmt); }


/* fp16 -> fp32, exact (every fp16 is a float): the CPU's conversion where it has one, else by the bits. */
static inline float half_to_float(unsigned short h) {
  unsigned int sign = (unsigned int)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
  float f;
  if (e == 0) { /* zero or subnormal: man 2^-24, exact */
    f = (float)man * 0x1p-24f;
    return sign ? -f : f;
  }
  bits = sign | (e == 31 ? 0x7f800000 | (man << 13) : ((e + 112) << 23) | (man << 13));
  __builtin_memcpy(&f, &bits, 4);
  return f;
}
static inline vf load_half(const unsigned short *p) {
#if defined(SPECVIZ_PLAIN_C)
  vf v;
  for (int i = 0; i < VW; i++) v[i] = half_to_float(p[i]);
  return v;
#elif defined(__AVX512F__)
  return (vf)_mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
#elif defined(__AVX2__) && defined(__F16C__)
  return (vf)_mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
#else
  vf v;
  for (int i = 0; i < VW; i++) v[i] = half_to_float(p[i]);
  return v;
#endif
}
/* VW bytes widened to VW ints, zero- or sign-extended: one instruction where the level has it (GCC 12 turns the
   generic conversion into a byte at a time), else lane by lane. */
static inline vi load_u8(const unsigned char *p) {
#if defined(SPECVIZ_PLAIN_C)
  vi v;
  for (int i = 0; i < VW; i++) v[i] = p[i];
  return v;
#elif defined(__AVX512F__)
  return (vi)_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
#elif defined(__AVX2__)
  return (vi)_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p));
#elif defined(__x86_64__) && defined(__SSE2__)
  int word;
  __builtin_memcpy(&word, p, 4);
  __m128i z = _mm_setzero_si128(), b = _mm_cvtsi32_si128(word);
  return (vi)_mm_unpacklo_epi16(_mm_unpacklo_epi8(b, z), z);
#else
  vi v;
  for (int i = 0; i < VW; i++) v[i] = p[i];
  return v;
#endif
}
static inline vi load_s8(const unsigned char *p) {
#if defined(SPECVIZ_PLAIN_C)
  vi v;
  for (int i = 0; i < VW; i++) v[i] = (signed char)p[i];
  return v;
#elif defined(__AVX512F__)
  return (vi)_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p));
#elif defined(__AVX2__)
  return (vi)_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p));
#elif defined(__x86_64__) && defined(__SSE2__)
  int word;
  __builtin_memcpy(&word, p, 4);
  __m128i z = _mm_setzero_si128(), b = _mm_cvtsi32_si128(word);
  return (vi)_mm_srai_epi32(_mm_unpacklo_epi16(z, _mm_unpacklo_epi8(z, b)), 24);
#else
  vi v;
  for (int i = 0; i < VW; i++) v[i] = (signed char)p[i];
  return v;
#endif
}
#define TOF(v) __builtin_convertvector((v), vf)

/* Ask for the `bytes` of a block SPECVIZ_PREFETCH bytes ahead, a line at a time. */
static inline void prefetch_block(const unsigned char *p, long bytes) {
#if SPECVIZ_PREFETCH
  for (long c = 0; c < bytes; c += 64) __builtin_prefetch(p + c + SPECVIZ_PREFETCH, 0, 3);
#else
  (void)p, (void)bytes;
#endif
}

/* The accumulators of R rows against one panel, as PANEL_ROWS keeps them, and the same store. */
#define ACC_DECL                                                                                        \
  vf a0 = {0}, b0 = {0}, a1 = {0}, b1 = {0}, a2 = {0}, b2 = {0}, a3 = {0}, b3 = {0};                    \
  vf a4 = {0}, b4 = {0}, a5 = {0}, b5 = {0}, a6 = {0}, b6 = {0}, a7 = {0}, b7 = {0};
#define ACC_INPUT(R, wa, wb, i)                                                                         \
  do {                                                                                                  \
    KEEP(wa, wb);                                                                                       \
    float s = x[i];                                                                                     \
    a0 += wa * s, b0 += wb * s;                                                                         \
    if (R > 1) s = x[in + (i)], a1 += wa * s, b1 += wb * s;                                             \
    if (R > 2) s = x[2 * in + (i)], a2 += wa * s, b2 += wb * s;                                         \
    if (R > 3) s = x[3 * in + (i)], a3 += wa * s, b3 += wb * s;                                         \
    if (R > 4) s = x[4 * in + (i)], a4 += wa * s, b4 += wb * s;                                         \
    if (R > 5) s = x[5 * in + (i)], a5 += wa * s, b5 += wb * s;                                         \
    if (R > 6) s = x[6 * in + (i)], a6 += wa * s, b6 += wb * s;                                         \
    if (R > 7) s = x[7 * in + (i)], a7 += wa * s, b7 += wb * s;                                         \
  } while (0)
#define ACC_STORE(R)                                                                                    \
  vf res[16] = {a0, b0, a1, b1, a2, b2, a3, b3, a4, b4, a5, b5, a6, b6, a7, b7};                        \
  for (int r = 0; r < R; r++)                                                                           \
    for (long k = 0; k < nvalid; k++) {                                                                 \
      float v = res[2 * r + k / VW][k % VW];                                                            \
      y[r * out + k] = acc ? y[r * out + k] + v : v;                                                    \
    }

/* Each format's walk over one panel's bytes p (in inputs): per input ii, its PW weights rebuilt as wa (outputs 0..VW-1)
   and wb (VW..PW-1), then BODY. The one place each format's arithmetic is written: the kernels and the
   de-quantizer (specviz_dequant) both walk with it. */
#define WALK_Q8_0(p, in, BODY)                                                                          \
  for (long i0 = 0; i0 < in; i0 += 32, p += 34 * PW) {                                                  \
    prefetch_block(p, 34 * PW);                                                                         \
    vf da = load_half((const unsigned short *)p), db = load_half((const unsigned short *)p + VW);       \
    const unsigned char *q = p + 2 * PW;                                                                \
    for (long j = 0; j < 32; j++) {                                                                     \
      long ii = i0 + j;                                                                                 \
      vf wa = TOF(load_s8(q + j * PW)) * da, wb = TOF(load_s8(q + j * PW + VW)) * db; /* exact */       \
      BODY;                                                                                             \
    }                                                                                                   \
  }
#define WALK_Q4_1(p, in, BODY)                                                                          \
  for (long i0 = 0; i0 < in; i0 += 32, p += 20 * PW) {                                                  \
    prefetch_block(p, 20 * PW);                                                                         \
    const unsigned short *h = (const unsigned short *)p;                                                \
    vf da = load_half(h), db = load_half(h + VW), ma = load_half(h + PW), mb = load_half(h + PW + VW);  \
    const unsigned char *q = p + 4 * PW;                                                                \
    for (long j = 0; j < 32; j++) {                                                                     \
      long ii = i0 + j;                                                                                 \
      vi n = load_u8(q + j * VW);                                                                       \
      vf wa = TOF(n & 15) * da + ma, wb = TOF(n >> 4) * db + mb; /* d q exact: one rounding */          \
      BODY;                                                                                             \
    }                                                                                                   \
  }
#define WALK_Q5_0(p, in, BODY)                                                                          \
  for (long i0 = 0; i0 < in; i0 += 32, p += 22 * PW) {                                                  \
    prefetch_block(p, 22 * PW);                                                                         \
    vf da = load_half((const unsigned short *)p), db = load_half((const unsigned short *)p + VW);       \
    const unsigned char *q = p + 2 * PW, *qh = q + 16 * PW;                                             \
    for (long j = 0; j < 32; j++) {                                                                     \
      long ii = i0 + j;                                                                                 \
      vi n = load_u8(q + j * VW), hb = load_u8(qh + j / 4 * VW) >> (j % 4 * 2);                         \
      vf wa = TOF(((n & 15) | ((hb & 1) << 4)) - 16) * da; /* exact */                                  \
      vf wb = TOF(((n >> 4) | ((hb >> 1 & 1) << 4)) - 16) * db;                                         \
      BODY;                                                                                             \
    }                                                                                                   \
  }
#define WALK_Q4_K(p, in, BODY)                                                                          \
  for (long i0 = 0; i0 < in; i0 += 256, p += 148 * PW) {                                                \
    const unsigned short *h = (const unsigned short *)p;                                                \
    vf da = load_half(h), db = load_half(h + VW), na = load_half(h + PW), nb = load_half(h + PW + VW);  \
    const unsigned char *sc = p + 4 * PW, *mn = sc + 8 * PW, *q = mn + 8 * PW;                           \
    for (long s = 0; s < 8; s++) {                                                                      \
      prefetch_block(q + s * 32 * VW, 32 * VW);                                                         \
      /* gguf-py: d sc and dmin m (exact), then (d sc) q - dmin m: one rounding */                      \
      vf sa = da * TOF(load_u8(sc + s * PW)), sb = db * TOF(load_u8(sc + s * PW + VW));                 \
      vf ma = na * TOF(load_u8(mn + s * PW)), mb = nb * TOF(load_u8(mn + s * PW + VW));                 \
      for (long j = 0; j < 32; j++) {                                                                   \
        long ii = i0 + s * 32 + j;                                                                      \
        vi n = load_u8(q + (s * 32 + j) * VW);                                                          \
        vf wa = TOF(n & 15) * sa - ma, wb = TOF(n >> 4) * sb - mb;                                      \
        BODY;                                                                                           \
      }                                                                                                 \
    }                                                                                                   \
  }
#define WALK_Q6_K(p, in, BODY)                                                                          \
  for (long i0 = 0; i0 < in; i0 += 256, p += 210 * PW) {                                                \
    const unsigned short *h = (const unsigned short *)p;                                                \
    vf da = load_half(h), db = load_half(h + VW);                                                       \
    const unsigned char *sc = p + 2 * PW, *q = sc + 16 * PW;                                            \
    for (long s = 0; s < 16; s++, q += 24 * VW) {                                                       \
      prefetch_block(q, 24 * VW);                                                                       \
      /* gguf-py: d sc (exact), then (d sc) q: one rounding */                                          \
      vf sa = da * TOF(load_s8(sc + s * PW)), sb = db * TOF(load_s8(sc + s * PW + VW));                 \
      for (long j = 0; j < 16; j++) {                                                                   \
        long ii = i0 + s * 16 + j;                                                                      \
        vi n = load_u8(q + j * VW), hi = load_u8(q + 16 * VW + j / 2 * VW) >> (j % 2 * 4);              \
        vf wa = TOF(((n & 15) | ((hi & 3) << 4)) - 32) * sa;                                            \
        vf wb = TOF(((n >> 4) | ((hi >> 2 & 3) << 4)) - 32) * sb;                                       \
        BODY;                                                                                           \
      }                                                                                                 \
    }                                                                                                   \
  }

/* One panel of each format against R rows: the same signature as panel##R, pf the panel's bytes. */
#define QPANEL(NAME, WALK, R)                                                                           \
  static void NAME##R(const float *restrict pf, const float *restrict x, float *restrict y, long in,    \
                      long out, long nvalid, int acc) {                                                 \
    const unsigned char *p = (const unsigned char *)pf;                                                 \
    ACC_DECL                                                                                            \
    WALK(p, in, ACC_INPUT(R, wa, wb, ii));                                                              \
    ACC_STORE(R)                                                                                        \
  }
#define QPANELS(R)                                                                                      \
  QPANEL(q8_0_, WALK_Q8_0, R)                                                                           \
  QPANEL(q4_1_, WALK_Q4_1, R)                                                                           \
  QPANEL(q4_k_, WALK_Q4_K, R)                                                                           \
  QPANEL(q6_k_, WALK_Q6_K, R)                                                                           \
  QPANEL(q5_0_, WALK_Q5_0, R)

/* One panel de-quantized into rows (PW, in), row-major: the weights the walk builds, stored. */
#define STORE_COLUMN(wa, wb, ii)                                                                        \
  for (int l = 0; l < VW; l++) rows[l * in + ii] = wa[l], rows[(VW + l) * in + ii] = wb[l]
static void dequant_panel(const void *pf, int fmt, long in, float *rows) {
  const unsigned char *p = (const unsigned char *)pf;
  switch (fmt) {
  case FMT_Q8_0: WALK_Q8_0(p, in, STORE_COLUMN(wa, wb, ii)); break;
  case FMT_Q4_1: WALK_Q4_1(p, in, STORE_COLUMN(wa, wb, ii)); break;
  case FMT_Q4_K: WALK_Q4_K(p, in, STORE_COLUMN(wa, wb, ii)); break;
  case FMT_Q6_K: WALK_Q6_K(p, in, STORE_COLUMN(wa, wb, ii)); break;
  case FMT_Q5_0: WALK_Q5_0(p, in, STORE_COLUMN(wa, wb, ii)); break;
  default: {
    const float *w = (const float *)pf;
    for (long ii = 0; ii < in; ii++)
      for (int l = 0; l < PW; l++) rows[l * in + ii] = w[ii * PW + l];
  }
  }
}

QPANELS(1)
QPANELS(2)
QPANELS(3)
QPANELS(4)
#if RMAX >= 6
QPANELS(5)
QPANELS(6)
#endif
#if RMAX >= 8
QPANELS(7)
QPANELS(8)
#endif
#if RMAX >= 8
#define ROW_FNS(f) {0, f##1, f##2, f##3, f##4, f##5, f##6, f##7, f##8}
#elif RMAX >= 6
#define ROW_FNS(f) {0, f##1, f##2, f##3, f##4, f##5, f##6}
#else
#define ROW_FNS(f) {0, f##1, f##2, f##3, f##4}
#endif
/* Per format (FMT_*), the panel kernel for 1..RMAX rows. */
static const panel_fn FMT_PANEL[6][RMAX + 1] = {ROW_FNS(panel), ROW_FNS(q8_0_), ROW_FNS(q4_1_), ROW_FNS(q4_k_),
                                                ROW_FNS(q6_k_), ROW_FNS(q5_0_)};

/* What native.py reads of the build: its panel width (the weights' packed layout) and its level. */
int specviz_panel_width(void) { return PW; }
const char *specviz_level(void) { return LEVEL; }

/* Inside a parallel region, the panels split between the team: y[r, o] (=, or += when acc) W[o] . x[r]
   (+ bias[o]) for every row r and output o < out; w in panels of format fmt (FMT_F32: fp32 panels; else the
   GGUF blocks regrouped by panel, above). */
static void matvec_team(const void *w, int fmt, const float *bias, const float *x, float *y, long in, long out,
                        long rows, int acc) {
  long panels = (out + PW - 1) / PW, bytes = panel_bytes(fmt, in);
  const panel_fn *fns = FMT_PANEL[fmt];
#pragma omp for schedule(static)
  for (long p = 0; p < panels; p++) {
    long o = p * PW, nvalid = out - o < PW ? out - o : PW;
    const float *wp = (const float *)((const char *)w + p * bytes);
    for (long r0 = 0; r0 < rows; r0 += RMAX) {
      long n = rows - r0 < RMAX ? rows - r0 : RMAX;
      fns[n](wp, x + r0 * in, y + r0 * out + o, in, out, nvalid, acc);
    }
    if (bias)
      for (long r = 0; r < rows; r++)
        for (long k = o; k < o + nvalid; k++) y[r * out + k] += bias[k];
  }
}

void specviz_gemv(const float *w, const float *x, const float *bias, float *y, long in, long out, long rows,
                  int threads) {
#pragma omp parallel num_threads(threads)
  matvec_team(w, FMT_F32, bias, x, y, in, out, rows, 0);
}

/* specviz_gemv on weights in format fmt (FMT_*); in a multiple of the format's block. */
void specviz_gemv_q(const void *w, int fmt, const float *x, const float *bias, float *y, long in, long out,
                    long rows, int threads) {
#pragma omp parallel num_threads(threads)
  matvec_team(w, fmt, bias, x, y, in, out, rows, 0);
}

/* The panels p0..p1-1 of weights in format fmt, de-quantized into dst as rows of the matrix ((p1 - p0) PW, in),
   row-major (the last panel's padding rows included, zeros): the same value of every weight the kernels build
   (for the many-row products, prefill, through a matmul library). */
void specviz_dequant(const void *w, int fmt, long in, long p0, long p1, float *dst, int threads) {
  long bytes = panel_bytes(fmt, in);
#pragma omp parallel for num_threads(threads) schedule(static)
  for (long p = p0; p < p1; p++) {
    float *rows = dst + (p - p0) * PW * in;
    const float *wp = (const float *)((const char *)w + p * bytes);
    dequant_panel(wp, fmt, in, rows);
  }
}

/* RMSNorm as transformers' LlamaRMSNorm in fp32: y = w * (x * rsqrt(mean(x^2) + eps)), per row of `dim`. */
static void rmsnorm(const float *x, const float *w, float *y, long rows, long dim, float eps) {
  for (long r = 0; r < rows; r++) {
    const float *xr = x + r * dim;
    float *yr = y + r * dim;
    vf acc = (vf){0};
    long i = 0;
    for (; i + VW <= dim; i += VW) {
      vf v = *(const vf *)(xr + i);
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

/* e^x of each lane (the exponent of 2 split off, Cephes' polynomial on what is left: at most 8.3e-8 from e^x,
   under one float ulp, over [-87, 0], the range a softmax feeds it), 0 for x < -87 (a masked key's -inf too). One call site per use,
   so every lane of every call runs the same instructions: a score's weight does not depend on its neighbours. */
static inline vf exp_lanes(vf x) {
  const vf log2e = (vf){0} + 1.44269504088896341f, ln2_hi = (vf){0} + 0.693359375f,
           ln2_lo = (vf){0} + -2.12194440e-4f, shifter = (vf){0} + 12582912.0f; /* 1.5 * 2^23: rounds */
  vi live = x >= -87.0f;
  x = (vf)((vi)x & live); /* masked lanes: 0 here (finite), zeroed at the end */
  vf n = (x * log2e + shifter) - shifter; /* round(x / ln 2) */
  vf r = (x - n * ln2_hi) - n * ln2_lo;   /* x - n ln 2, |r| <= ln 2 / 2 */
  vf poly = (vf){0} + 1.9875691500e-4f;
  poly = poly * r + 1.3981999507e-3f;
  poly = poly * r + 8.3334519073e-3f;
  poly = poly * r + 4.1665795894e-2f;
  poly = poly * r + 1.6666665459e-1f;
  poly = poly * r + 5.0000001201e-1f;
  poly = poly * r * r + r + 1.0f; /* e^r */
  vi scale = (__builtin_convertvector(n, vi) + 127) << 23; /* 2^n */
  return (vf)((vi)(poly * (vf)scale) & live);
}

/* Attention of T queries over L cached keys (the new tokens' included), grouped-query heads, softmax in fp32.
   q: query t, head h at q + t * q_stride + h * hd. k, v: key j of kv head g at k + g * kv_stride + j * hd.
   mask (T, L) bytes, nonzero = may attend; NULL = causal with the new tokens at slots start..start+T-1.
   out (T, nh * hd): what the o projection reads. scratch: threads * (L + VW) floats (the scores).
   Per (query, head), in three passes over its keys: the scores (four keys at a time, each key's dot product
   summed in the same order whatever its neighbours), their weights e^(s - max) (exp_lanes, VW at a time), and
   the weighted sum of the values, in order of j (hd <= MAX_HD: held in registers; wider heads in memory). A
   query's result depends on its own keys only, so an AR step and the same row of a verification agree bitwise. */
#define MAX_HD 256
/* Ask for the floats SPECVIZ_PREFETCH bytes past [p, p + n) (a key or value row's worth, one line at a time). */
static inline void prefetch_span(const float *p, long n) {
#if SPECVIZ_PREFETCH
  for (long c = 0; c < n; c += 16) __builtin_prefetch((const char *)(p + c) + SPECVIZ_PREFETCH, 0, 3);
#else
  (void)p, (void)n;
#endif
}
static inline float dot_hd(const float *a, const float *b, long hd) {
  vf acc = (vf){0};
  for (long i = 0; i < hd; i += VW) acc += *(const vf *)(a + i) * *(const vf *)(b + i);
  return hsum(acc);
}

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
    float *s = scratch + (long)omp_get_thread_num() * (L + VW);
#else
    float *s = scratch;
#endif
    long limit = mask ? L : start + t + 1;
    const unsigned char *mrow = mask ? mask + t * L : 0;
    float m = -INFINITY;
    /* 1. the scores, -inf where the mask hides a key */
    if (hd % VW == 0) {
      long j = 0;
      for (; j + 4 <= limit; j += 4) {
        const float *k0 = K + j * hd;
        prefetch_span(k0, 4 * hd); /* the keys SPECVIZ_PREFETCH bytes ahead of these four */
        vf a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        for (long i = 0; i < hd; i += VW) {
          vf x = *(const vf *)(qv + i);
          a0 += x * *(const vf *)(k0 + i), a1 += x * *(const vf *)(k0 + hd + i);
          a2 += x * *(const vf *)(k0 + 2 * hd + i), a3 += x * *(const vf *)(k0 + 3 * hd + i);
        }
        s[j] = hsum(a0) * scale, s[j + 1] = hsum(a1) * scale;
        s[j + 2] = hsum(a2) * scale, s[j + 3] = hsum(a3) * scale;
      }
      for (; j < limit; j++) s[j] = dot_hd(qv, K + j * hd, hd) * scale;
    } else
      for (long j = 0; j < limit; j++) {
        float d = 0;
        for (long i = 0; i < hd; i++) d += qv[i] * K[j * hd + i];
        s[j] = d * scale;
      }
    for (long j = 0; j < limit; j++) {
      if (mrow && !mrow[j]) s[j] = -INFINITY;
      if (s[j] > m) m = s[j];
    }
    float *o = out + t * nh * hd + h * hd, sum = 0;
    if (m == -INFINITY) { /* every key masked: zeros, not NaN */
      for (long i = 0; i < hd; i++) o[i] = 0;
      continue;
    }
    /* 2. the weights e^(s - max): VW at a time, the last few through the same call (padded with masked keys) */
    for (long j = limit; j < limit + VW; j++) s[j] = -INFINITY;
    for (long j = 0; j < limit; j += VW) {
      vf x;
      for (int l = 0; l < VW; l++) x[l] = s[j + l] - m;
      vf w = exp_lanes(x);
      for (int l = 0; l < VW; l++) s[j + l] = w[l];
    }
    /* 3. the weighted sum of the values, in order of j */
    if (hd % VW == 0 && hd <= MAX_HD) {
      vf acc[MAX_HD / VW];
      long nv = hd / VW;
      for (long i = 0; i < nv; i++) acc[i] = (vf){0};
      for (long j = 0; j < limit; j++) {
        float p = s[j];
        if (p == 0) continue; /* a masked key (or one e^-87 below the max) */
        sum += p;
        const float *vj = V + j * hd;
        prefetch_span(vj, hd);
        for (long i = 0; i < nv; i++) acc[i] += p * *(const vf *)(vj + i * VW);
      }
      for (long i = 0; i < nv; i++)
        for (int l = 0; l < VW; l++) o[i * VW + l] = acc[i][l] / sum;
    } else {
      for (long i = 0; i < hd; i++) o[i] = 0;
      for (long j = 0; j < limit; j++) {
        float p = s[j];
        if (p == 0) continue;
        sum += p;
        for (long i = 0; i < hd; i++) o[i] += p * V[j * hd + i];
      }
      for (long i = 0; i < hd; i++) o[i] /= sum;
    }
  }
}

/* e^x lane by lane for x <= 0 (a logit minus its row's maximum): x = n ln2 + r, |r| <= ln2 / 2, e^r by its
   degree-7 Taylor polynomial (relative error below 2e-7 on that range), times 2^n put in the exponent bits (n >= -124:
   a normal float); x below -86 (e^x under 2^-124, nothing next to the row's 1 at its maximum) gives 0. */
static inline vf exp_nonpositive(vf x) {
  const vf lo = (vf){0} - 86.0f, round = (vf){0} + 12582912.0f; /* 1.5 * 2^23: adding it rounds to an integer */
  vi under = x < lo;
  x = (vf)(((vi)x & ~under) | ((vi)lo & under));
  vf t = x * 1.44269504f + round, nf = t - round;
  vi n = (vi)t - (vi)round; /* the integer nf, read from the mantissa's low bits */
  vf r = x - nf * 0.693145752f - nf * 1.42860677e-6f; /* ln 2 in two parts: n ln2_hi is exact */
  vf e = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720 + r * (1.0f / 5040)))))));
  vi bits = (vi)e + (n << 23);
  return (vf)(bits & ~under);
}

/* A verify forward's logits, (rows, n) fp32, each row read twice and nothing written but the answers: per row the
   first index of its maximum (argmax, as torch's), the log of the sum of e^(x - max) plus the max (lse: then any
   p(x) = e^(x - lse), the softmax never formed), and its k largest values (k <= n) with their indices, largest first,
   a tie to the lower index (top_ids, top_vals: rows x k). The sum adds VW lanes of at most 256 terms in float, then
   each such partial sum in double. The rows split between `threads` (a row is never split: its answer is the same
   however many threads run). */
void specviz_row_stats(const float *x, long rows, long n, long k, long *argmax, double *lse, long *top_ids,
                       float *top_vals, int threads) {
#pragma omp parallel for num_threads(rows > 1 ? threads : 1) schedule(static)
  for (long r = 0; r < rows; r++) {
    const float *row = x + r * n;
    long *ids = top_ids + r * k;
    float *vals = top_vals + r * k, m = row[0];
    long i = 0, full = n / VW * VW, filled = 0;
    for (long j = 0; j < k; j++) vals[j] = -__builtin_inff(), ids[j] = -1; /* a row of fewer finite values */
    vf mv = (vf){0} + row[0];
    vi at = {0}, lane; /* per lane: its largest value so far and where it first was */
    for (int l = 0; l < VW; l++) lane[l] = l;
    for (; i < full; i += VW) {
      vf v;
      __builtin_memcpy(&v, row + i, sizeof v);
      vi gt = v > mv, here = lane + (int)i;
      mv = (vf)(((vi)v & gt) | ((vi)mv & ~gt));
      at = (here & gt) | (at & ~gt);
    }
    long best = 0;
    for (int l = 0; l < VW; l++)
      if (mv[l] > m || (mv[l] == m && at[l] < best)) m = mv[l], best = at[l];
    for (; i < n; i++)
      if (row[i] > m) m = row[i], best = i;
    argmax[r] = best;
    double total = 0.0;
    float least = -__builtin_inff(); /* the k-th largest so far: only a larger value enters the list */
    for (i = 0; i < full;) {
      long stop = i + 256 * VW < full ? i + 256 * VW : full;
      vf acc = {0};
      for (long group; i < stop; i += group) { /* 8 vectors a group (the last of a stretch may hold fewer) */
        group = stop - i < 8 * VW ? stop - i : 8 * VW;
        vf most = (vf){0} - __builtin_inff();
        for (long j = 0; j < group; j += VW) {
          vf v;
          __builtin_memcpy(&v, row + i + j, sizeof v);
          acc += exp_nonpositive(v - m);
          vi gt = v > most;
          most = (vf)(((vi)v & gt) | ((vi)most & ~gt));
        }
        int any = filled < k;
        for (int l = 0; l < VW; l++) any |= most[l] > least;
        if (!any) continue; /* nothing in the group enters the list: the common case once it is full */
        for (long j = i; j < i + group; j++) { /* (continue above still moves i on by the group) */
          float val = row[j];
          if (!(val > least) && filled == k) continue;
          long at = filled < k ? filled++ : k - 1;
          while (at > 0 && vals[at - 1] < val) vals[at] = vals[at - 1], ids[at] = ids[at - 1], at--;
          vals[at] = val, ids[at] = j;
          if (filled == k) least = vals[k - 1];
        }
      }
      total += hsum(acc);
    }
    for (; i < n; i++) {
      float val = row[i];
      vf one = (vf){0} + (val - m);
      total += exp_nonpositive(one)[0];
      if (!(val > least) && filled == k) continue;
      long at = filled < k ? filled++ : k - 1;
      while (at > 0 && vals[at - 1] < val) vals[at] = vals[at - 1], ids[at] = ids[at - 1], at--;
      vals[at] = val, ids[at] = i;
      if (filled == k) least = vals[k - 1];
    }
    lse[r] = (double)m + __builtin_log(total);
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

/* A decoder layer's first half, inside a parallel region: h = RMSNorm(x); qkv = h @ W_qkv.T (+ b); RoPE on its
   q and k heads (`rotated` heads of hd at the start of each row); then, when kc is not NULL, each row's nkv key
   and value heads (the last 2 nkv heads of the row, keys first) written into the cache at slot + t: head g of
   key t at kc + g * kv_stride + (slot + t) * hd, values alike in vc. */
static void layer_qkv_team(const float *x, float *h, float *qkv, long T, long H, long width, const float *w_in,
                           float eps, const void *w_qkv, int f_qkv, const float *b_qkv, long rotated, long hd,
                           const float *cos, const float *sin, float *kc, float *vc, long kv_stride, long slot,
                           long nkv) {
#pragma omp single
  rmsnorm(x, w_in, h, T, H, eps);
  matvec_team(w_qkv, f_qkv, b_qkv, h, qkv, H, width, T, 0);
#pragma omp single
  {
    rope(qkv, T, width, rotated, hd, cos, sin);
    if (kc)
      for (long t = 0; t < T; t++)
        for (long g = 0; g < nkv; g++) {
          const float *k = qkv + t * width + (rotated - nkv + g) * hd, *v = k + nkv * hd;
          float *kd = kc + g * kv_stride + (slot + t) * hd, *vd = vc + g * kv_stride + (slot + t) * hd;
          for (long i = 0; i < hd; i++) kd[i] = k[i], vd[i] = v[i];
        }
  }
}

/* The rest of the layer, inside a parallel region, x (T, H) updated in place: att = attention(q over the
   cache's L keys); x += att @ W_o.T; h = RMSNorm(x); gu = h @ W_gu.T; act = silu(gate) * up;
   x += act @ W_down.T. ws: T (nh hd + H + 3 inter) + threads (L + VW) floats. */
static void layer_rest_team(float *x, const float *qkv, long width, const float *k, const float *v,
                            long kv_stride, long L, const unsigned char *mask, long start, long T, long H, long nh,
                            long nkv, long hd, long inter, const void *w_o, const float *w_post, float eps,
                            const void *w_gu, const void *w_down, const int *fmt, float *ws, float scale) {
  float *att = ws, *h = att + T * nh * hd, *gu = h + T * H, *act = gu + T * 2 * inter, *scores = act + T * inter;
  attention_team(qkv, width, k, v, kv_stride, mask, start, att, scores, T, L, nh, nkv, hd, scale);
  matvec_team(w_o, fmt[0], 0, att, x, nh * hd, H, T, 1);
#pragma omp single
  rmsnorm(x, w_post, h, T, H, eps);
  matvec_team(w_gu, fmt[1], 0, h, gu, H, 2 * inter, T, 0);
  silu_mul_team(gu, act, T, inter);
  matvec_team(w_down, fmt[2], 0, act, x, inter, H, T, 1);
}

/* layer_qkv_team alone, the keys and values left in qkv (another cache's update takes them: specviz_layers
   writes a pointer cache's itself). */
void specviz_layer_qkv(const float *x, float *h, float *qkv, long T, long H, long width, const float *w_in,
                       float eps, const void *w_qkv, int f_qkv, const float *b_qkv, long rotated, long hd,
                       const float *cos, const float *sin, int threads) {
#pragma omp parallel num_threads(threads)
  layer_qkv_team(x, h, qkv, T, H, width, w_in, eps, w_qkv, f_qkv, b_qkv, rotated, hd, cos, sin, 0, 0, 0, 0, 0);
}

void specviz_layer_rest(float *x, const float *qkv, long width, const float *k, const float *v, long kv_stride,
                        long L, const unsigned char *mask, long start, long T, long H, long nh, long nkv, long hd,
                        long inter, const void *w_o, const float *w_post, float eps, const void *w_gu,
                        const void *w_down, const int *fmt, float *ws, float scale, int threads) {
#pragma omp parallel num_threads(threads)
  layer_rest_team(x, qkv, width, k, v, kv_stride, L, mask, start, T, H, nh, nkv, hd, inter, w_o, w_post, eps, w_gu,
                  w_down, fmt, ws, scale);
}

/* Every decoder layer of one sequence, in one parallel region (one call a forward, not two a layer): layer l
   is layer_qkv (its T new keys and values written into kc[l], vc[l] at slots start..start+T-1) then layer_rest
   over the cache's start + T keys (mask as in attention, or NULL: causal). Per layer l the weights
   w[l * 7 + 0..6]: w_in, w_qkv, b_qkv (or NULL), w_o, w_post, w_gu, w_down, and the formats of its four
   projections fmt[l * 4 + 0..3]: qkv, o, gu, down (FMT_*). ws: T (width + nh hd + 2 H + 3 inter) + threads
   (start + T + VW) floats. */
void specviz_layers(float *x, long layers, const void *const *w, const int *fmt, float *const *kc, float *const *vc,
                    long kv_stride, long start, long T, long H, long width, long nh, long nkv, long hd, long inter,
                    float eps, const float *cos, const float *sin, const unsigned char *mask, float *ws,
                    float scale, int threads) {
  float *qkv = ws, *h = qkv + T * width, *rest = h + T * H;
#pragma omp parallel num_threads(threads)
  for (long l = 0; l < layers; l++) {
    const void *const *lw = w + l * 7;
    const int *lf = fmt + l * 4;
    layer_qkv_team(x, h, qkv, T, H, width, lw[0], eps, lw[1], lf[0], lw[2], nh + nkv, hd, cos, sin, kc[l], vc[l],
                   kv_stride, start, nkv);
    layer_rest_team(x, qkv, width, kc[l], vc[l], kv_stride, start + T, mask, start, T, H, nh, nkv, hd, inter,
                    lw[3], lw[4], eps, lw[5], lw[6], lf + 1, rest, scale);
  }
}
