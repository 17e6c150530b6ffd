// cfd_median.h: the median of timings, for the benchmarks and the viewer (host code only).
#ifndef CHAINFD_CFD_MEDIAN_H
#define CHAINFD_CFD_MEDIAN_H

#include <stdlib.h>

static inline int cfd_cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

// The median of x[0..n), n >= 1 (sorts x in place).
static inline double cfd_median(double* x, int n) {
  qsort(x, (size_t)n, sizeof(double), cfd_cmp_double);
  return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
}

#endif  // CHAINFD_CFD_MEDIAN_H
