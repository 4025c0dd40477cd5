/* native.c's products against a plain reference, for a build Python cannot load here (another machine's: the
   aarch64 path cross-compiled and run under an emulator by tests/test_native.py). Prints the level, the panel
   width and the largest error; exit status 0 when every product is within fp32 rounding. */
#include "../engine/runtime/native.c"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  const long in = 37, out = 45;
  const int pw = specviz_panel_width();
  const long panels = (out + pw - 1) / pw;
  float *w = calloc(panels * pw * in, sizeof(float)), *W = malloc(out * in * sizeof(float));
  float *x = malloc(9 * in * sizeof(float)), *y = malloc(9 * out * sizeof(float)), *b = malloc(out * sizeof(float));
  srand(1);
  for (long i = 0; i < out * in; i++) W[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
  for (long i = 0; i < 9 * in; i++) x[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
  for (long i = 0; i < out; i++) b[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
  for (long p = 0; p < panels; p++) /* native.pack: panel p holds outputs p pw .. p pw + pw - 1, transposed */
    for (long i = 0; i < in; i++)
      for (long k = 0; k < pw; k++) {
        long o = p * pw + k;
        w[p * in * pw + i * pw + k] = o < out ? W[o * in + i] : 0.0f;
      }
  double worst = 0;
  for (long rows = 1; rows <= 9; rows++) {
    specviz_gemv(w, x, b, y, in, out, rows, 2);
    for (long r = 0; r < rows; r++)
      for (long o = 0; o < out; o++) {
        double ref = b[o];
        for (long i = 0; i < in; i++) ref += (double)x[r * in + i] * W[o * in + i];
        double err = fabs(ref - y[r * out + o]);
        if (err > worst) worst = err;
      }
  }
  /* the block kernels: Q8_0 and Q4_1 panels (blocks.py's layout) against the fp32 panels of the weights they
     hold (native.c's own de-quantizer), bit for bit, with fp16 scales of every kind (a subnormal among them) */
  int blocks_equal = 1;
  {
    const long bin = 64, nb = bin / 32;
    unsigned char *q8 = calloc(panels * nb * 34 * pw, 1), *q41 = calloc(panels * nb * 20 * pw, 1);
    float *f8 = malloc(panels * pw * bin * sizeof(float)), *f41 = malloc(panels * pw * bin * sizeof(float));
    float *pk = malloc(panels * pw * bin * sizeof(float)), *xb = malloc(9 * bin * sizeof(float));
    float *y1 = malloc(9 * out * sizeof(float)), *y2 = malloc(9 * out * sizeof(float));
    for (long i = 0; i < panels * nb * 34 * pw; i++) q8[i] = rand() & 255;
    for (long i = 0; i < panels * nb * 20 * pw; i++) q41[i] = rand() & 255;
    for (long p = 0; p < panels; p++) /* the scales: fp16 below 2^-3 (exponent < 12), one subnormal */
      for (long b = 0; b < nb; b++) {
        unsigned short *d8 = (unsigned short *)(q8 + (p * nb + b) * 34 * pw), *d4 = (unsigned short *)(q41 + (p * nb + b) * 20 * pw);
        for (long k = 0; k < 2 * pw; k++) d4[k] = (unsigned short)((rand() & 0x83ff) | ((rand() % 12) << 10));
        for (long k = 0; k < pw; k++) d8[k] = (unsigned short)((rand() & 0x83ff) | ((rand() % 12) << 10));
        d8[0] = 0x0003; /* subnormal */
      }
    for (long i = 0; i < 9 * bin; i++) xb[i] = (float)(rand() % 2001 - 1000) / 1000.0f;
    const unsigned char *src[2] = {q8, q41};
    float *deq[2] = {f8, f41};
    const int fmt[2] = {FMT_Q8_0, FMT_Q4_1};
    for (int f = 0; f < 2; f++) {
      specviz_dequant(src[f], fmt[f], bin, 0, panels, deq[f], 2); /* rows (panels pw, bin) */
      for (long p = 0; p < panels; p++)
        for (long i = 0; i < bin; i++)
          for (long k = 0; k < pw; k++) pk[p * bin * pw + i * pw + k] = deq[f][(p * pw + k) * bin + i];
      for (long rows = 1; rows <= 9; rows++) {
        specviz_gemv_q(src[f], fmt[f], xb, 0, y1, bin, out, rows, 2);
        specviz_gemv(pk, xb, 0, y2, bin, out, rows, 2);
        if (memcmp(y1, y2, rows * out * sizeof(float))) blocks_equal = 0;
      }
    }
  }
  printf("%s %d %g blocks %s\n", specviz_level(), pw, worst, blocks_equal ? "bitwise" : "DIFFER");
  return worst < 1e-4 && blocks_equal ? 0 : 1;
}
