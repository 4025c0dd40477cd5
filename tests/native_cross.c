/* native.c built for another machine (tests/test_native_cross.py cross-compiles it with this driver and runs it
   under user-mode emulation: NEON on an x86 host), checked as tests/native_level_check.py checks each level this host
   runs: the GGUF block kernels' products bitwise the fp32 kernel's on the same weights de-quantized.

   `native_cross width` prints the build's level and panel width. `native_cross` reads cases from stdin until EOF,
   each: int32 fmt, in, out, rows; int64 n (bytes of the packed blocks) and n bytes; int64 m (floats of the packed
   fp32 panels) and m floats; rows * in floats of input. It prints one line a case, "same" or "differs at k" (the
   first output that differs, bitwise), and exits 0 when every case was read whole. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../engine/runtime/native.c"

static void *read_n(size_t bytes) {
  void *p = malloc(bytes ? bytes : 1);
  if (!p || fread(p, 1, bytes, stdin) != bytes) {
    fprintf(stderr, "a case ended early\n");
    exit(2);
  }
  return p;
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "width") == 0) {
    printf("%s %d\n", specviz_level(), specviz_panel_width());
    return 0;
  }
  int32_t head[4];
  while (fread(head, sizeof head, 1, stdin) == 1) {
    long fmt = head[0], in = head[1], out = head[2], rows = head[3];
    int64_t n, m;
    if (fread(&n, sizeof n, 1, stdin) != 1) return 2;
    void *q = read_n((size_t)n);
    if (fread(&m, sizeof m, 1, stdin) != 1) return 2;
    float *w = read_n((size_t)m * sizeof(float));
    float *x = read_n((size_t)(rows * in) * sizeof(float));
    float *a = malloc(rows * out * sizeof(float)), *b = malloc(rows * out * sizeof(float));
    specviz_gemv_q(q, (int)fmt, x, NULL, a, in, out, rows, 1);
    specviz_gemv(w, x, NULL, b, in, out, rows, 1);
    long k = 0;
    while (k < rows * out && memcmp(a + k, b + k, sizeof(float)) == 0) k++;
    if (k == rows * out)
      printf("same\n");
    else
      printf("differs at %ld\n", k);
    free(q), free(w), free(x), free(a), free(b);
  }
  return 0;
}
