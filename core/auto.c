#include "auto.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "auto_table.h"
#include "chain.h"

// whether the table's back end b runs here: on a GPU only with one; with balls only if it takes them
static int usable(const char* b, int have_gpu, int shape) {
  if (!have_gpu && !strncmp(b, "cuda.", 5)) return 0;
  return shape == CFD_SHAPE_CHAIN || !strcmp(b, "cpu.fast") || !strcmp(b, "cuda.abia");
}

const char* cfd_auto_pick(int n, int B, int have_gpu, int shape, char* why, int why_size) {
  if (shape == CFD_SHAPE_TREE) {
    const char* pick = have_gpu && B >= CFD_AUTO_TREE_GPU_MIN_B ? "cuda.abia" : "cpu.fast";
    if (why && why_size > 0)
      snprintf(why, why_size, "n=%d B=%d -> %s: a branching tree (cpu.fast, or "
               "cuda.abia from %d states with a CUDA device%s)", n, B, pick,
               CFD_AUTO_TREE_GPU_MIN_B, have_gpu ? "" : "; there is none");
    return pick;
  }
  const cfd_auto_entry* best = NULL;
  double best_d = INFINITY;
  int count = (int)(sizeof(cfd_auto_table) / sizeof(cfd_auto_table[0]));
  for (int k = 0; k < count; k++) {
    const cfd_auto_entry* e = &cfd_auto_table[k];
    double d = fabs(log2((double)n / e->n)) + fabs(log2((double)B / e->B));
    if (d < best_d) best_d = d, best = e;
  }
  const char* pick = "cpu.fast";
  double us = 0;
  for (int r = 0; best && r < 3 && best->backend[r]; r++) {
    if (!usable(best->backend[r], have_gpu, shape)) continue;
    pick = best->backend[r];
    us = best->us[r];
    break;
  }
  if (why && why_size > 0) {
    if (!best) {
      snprintf(why, why_size, "no measurements: cpu.fast");
    } else {
      int len = snprintf(why, why_size, "n=%d B=%d -> %s: at the nearest measured point (n=%d, B=%d; %s)",
                         n, B, pick, best->n, best->B, CFD_AUTO_TABLE_DEVICE);
      for (int r = 0; r < 3 && best->backend[r] && len < why_size; r++)
        len += snprintf(why + len, why_size - len, "%s %s %.4g us", r ? "," : "", best->backend[r],
                        best->us[r]);
      if (shape == CFD_SHAPE_BALL_CHAIN && len < why_size)
        len += snprintf(why + len, why_size - len, "; with ball or free joints, the fastest of "
                        "cpu.fast and cuda.abia");
      if (!have_gpu && len < why_size)
        snprintf(why + len, why_size - len, "; no CUDA device, so the fastest CPU back end");
      else if (us == 0 && len < why_size)
        snprintf(why + len, why_size - len, "; none measured there runs here");
    }
  }
  return pick;
}
