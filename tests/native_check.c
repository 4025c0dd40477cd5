/* native.c's products against a plain reference, for a build Python cannot load here (another machine's: the
   aarch64 path cross-compiled and run under an emulator by tests/test_native.py). Prints the level, the panel
   width and the largest error; exit status 0 when every product is within fp32 rounding. */
#include "../engine/runtime/native.c"

#include <stdio.h>
#include <stdlib.h>

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
  printf("%s %d %g\n", specviz_level(), pw, worst);
  return worst < 1e-4 ? 0 : 1;
}
