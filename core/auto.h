// auto.h: backend=auto. Picks the back end for n links and a batch of B states from the table the
// GPU benchmark measured (bench/plot.py --auto-table writes core/auto_table.h), and says why.
#ifndef CHAINFD_AUTO_H
#define CHAINFD_AUTO_H

typedef struct cfd_auto_entry {
  int n, B;                 // the measured point
  const char* backend[3];   // chainfd's back ends there, fastest first (NULL: fewer measured)
  double us[3];             // their time per batch, microseconds
} cfd_auto_entry;

// The back end name for (n, B): the fastest at the nearest measured point (distance in log2 n and
// log2 B), skipping GPU back ends when have_gpu is 0. why (may be NULL) explains the choice.
// shape (chain.h's CFD_SHAPE_*): the table was measured on serial chains of hinges and slides.
// One chain with ball or free joints: the table's pick among the back ends that take balls
// (cpu.fast, cuda.abia: its scans for one long chain, as on hinges). A branching tree, which only
// cpu.* and cuda.abia take: cuda.abia (a thread per instance) from CFD_AUTO_TREE_GPU_MIN_B states
// on, cpu.fast below (the crossover of the 30-dof floating tree: docs/RESULTS.md, "Trees").
#define CFD_AUTO_TREE_GPU_MIN_B 64
const char* cfd_auto_pick(int n, int B, int have_gpu, int shape, char* why, int why_size);

#endif
