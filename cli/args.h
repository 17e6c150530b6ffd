// Strict parsing of numeric command-line options, shared by the chainfd tool and the benchmarks
// (same layer; the benchmarks include it as "../cli/args.h"). A value must be a whole number (or a
// finite real) with nothing after it and inside the option's range; otherwise a message naming the
// program, the option and the value goes to stderr and the parser returns nonzero, so that the
// caller exits with status 2 (atoi/atof took "abc" as 0, "nan" as NaN and wrapped large values).
#ifndef CHAINFD_CLI_ARGS_H
#define CHAINFD_CLI_ARGS_H

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

// *out = s as an integer in [lo, hi]; 0, or 1 after saying why not.
static inline int cfd_arg_int(const char* prog, const char* opt, const char* s, long lo, long hi,
                              int* out) {
  char* end = NULL;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || isspace((unsigned char)s[0]) || errno == ERANGE || v < lo || v > hi) {
    fprintf(stderr, "%s: %s takes a whole number from %ld to %ld, not '%s'\n", prog, opt, lo, hi, s);
    return 1;
  }
  *out = (int)v;
  return 0;
}

// *out = s as an unsigned 64-bit integer (a seed); 0, or 1 after saying why not.
static inline int cfd_arg_u64(const char* prog, const char* opt, const char* s,
                              unsigned long long* out) {
  char* end = NULL;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 10);
  // strtoull accepts "-1" as 2^64-1: a sign is refused here
  if (end == s || *end || !isdigit((unsigned char)s[0]) || errno == ERANGE) {
    fprintf(stderr, "%s: %s takes a whole number from 0 to %llu, not '%s'\n", prog, opt,
            (unsigned long long)-1, s);
    return 1;
  }
  *out = v;
  return 0;
}

// *out = s as a finite real in [lo, hi]; 0, or 1 after saying why not.
static inline int cfd_arg_double(const char* prog, const char* opt, const char* s, double lo,
                                 double hi, double* out) {
  char* end = NULL;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || isspace((unsigned char)s[0]) || !isfinite(v) || errno == ERANGE ||
      v < lo || v > hi) {
    fprintf(stderr, "%s: %s takes a finite number from %g to %g, not '%s'\n", prog, opt, lo, hi, s);
    return 1;
  }
  *out = v;
  return 0;
}

// p, or a message and exit status 1 when its allocation failed (for programs that stop there:
// the benchmarks).
static inline void* cfd_need(const char* prog, void* p) {
  if (!p) {
    fprintf(stderr, "%s: out of memory\n", prog);
    exit(1);
  }
  return p;
}

#endif
