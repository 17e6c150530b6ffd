// test_util.h: a minimal test harness (no dependencies): EXPECT records a failure and goes on.
#ifndef CHAINFD_TEST_UTIL_H
#define CHAINFD_TEST_UTIL_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cfd_math.h"

static int test_failures = 0;

#define EXPECT(cond, ...)                                                   \
  do {                                                                      \
    if (!(cond)) {                                                          \
      test_failures++;                                                      \
      fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond);    \
      fprintf(stderr, __VA_ARGS__);                                         \
      fprintf(stderr, "\n");                                                \
    }                                                                       \
  } while (0)

#define TEST_EXIT()                                                         \
  do {                                                                      \
    if (test_failures) fprintf(stderr, "%d check(s) failed\n", test_failures); \
    else printf("all checks passed\n");                                     \
    return test_failures ? 1 : 0;                                           \
  } while (0)

// max |a_i - b_i| (NaN propagates)
static inline double max_abs_diff(const double* a, const double* b, size_t n) {
  double e = 0;
  for (size_t i = 0; i < n; i++) {
    double x = fabs(a[i] - b[i]);
    e = cfd_worst(e, x);
  }
  return e;
}

#endif
