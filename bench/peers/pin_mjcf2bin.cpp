// pin_mjcf2bin.cpp: parses an MJCF file with Pinocchio's own parser (pinocchio::mjcf::buildModel,
// from the wheel's libpinocchio_parsers) and writes the model with Pinocchio's serialization
// (boost binary archive), for peers_cpu to load.
//
// Why a separate program: the wheel's shared libraries are built with their own flags and
// defines (PINOCCHIO_ENABLE_TEMPLATE_INSTANTIATION, SSE-only Eigen with 16-byte alignment);
// mixing them with a translation unit built for x86-64-v3 in one executable breaks Eigen's and
// Pinocchio's ABI (mismatched inline instantiations; "double free" inside DataTpl's destructor).
// So the parser runs here, built as the wheel expects, and peers_cpu, which times aba, uses
// Pinocchio header-only with the same compiler flags as chainfd's kernels.
#include <pinocchio/multibody.hpp>
#include <pinocchio/parsers/mjcf.hpp>
#include <pinocchio/serialization.hpp>

#include <cstdio>
#include <exception>

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: pin_mjcf2bin MODEL.xml OUT.bin\n");
    return 2;
  }
  try {
    pinocchio::Model pm;
    pinocchio::mjcf::buildModel(argv[1], pm);
    pinocchio::serialization::saveToBinary(pm, argv[2]);
    std::printf("pin_mjcf2bin: %s: nq=%d nv=%d njoints=%d\n", argv[1], (int)pm.nq, (int)pm.nv,
                (int)pm.njoints);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "pin_mjcf2bin: %s: %s\n", argv[1], e.what());
    return 1;
  }
  return 0;
}
