// `mantissa info`: what this machine's kernels can do, so a user knows which paths their numbers came
// from: conversion kernel levels, AMX, and for each oneDNN primitive kind and dtype whether oneDNN runs
// it here or which fallback does; and the CUDA backend: built or not, the GPUs (or why none), and the
// kernel families it runs with their dtypes.
#include <fmt/format.h>
#include <omp.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "training.h"
#include "mantissa/numeric/bulk.h"
#include "mantissa/backend/backend_select.h"
#include "mantissa/backend/cuda.h"
#include "mantissa/dist/device_reducer.h"
#include "peak_flops.h"

namespace mantissa::cli {
namespace {

int run_info(bool json) {
  const OnednnVersion v = onednn_version();
  constexpr DType kTypes[] = {DType::f32, DType::bf16, DType::f16};
  nlohmann::json out;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    out["conversion_kernels"][std::string(isa_name(isa))] = isa_supported(isa);
  }
  out["conversion_kernels_active"] = std::string(isa_name(active_isa()));
  out["amx_bf16"] = amx_bf16_usable();
  out["threads"] = omp_get_max_threads();
  out["onednn_version"] = fmt::format("{}.{}.{}", v.major, v.minor, v.patch);
  for (OnednnPrimitive kind : kOnednnPrimitives) {
    for (DType t : kTypes) {
      out["onednn"][onednn_primitive_name(kind)][dtype_name(t)] = onednn_supports(kind, t);
      out["paths"][onednn_primitive_name(kind)][dtype_name(t)] = cpu_path(kind, t);
    }
  }
  // FP8 has no CPU arithmetic: its values are held in bf16 and multiplied on the bf16 matmul path.
  const std::string fp8 = "emulated: e4m3/e5m2 values held exactly in bf16, multiplied by the bf16 matmul (" +
                          std::string(cpu_path(OnednnPrimitive::matmul, DType::bf16)) + ")";
  out["fp8"] = fp8;
  // Data parallel: the MPI this build has, and this process's place (rank 0 of 1 unless under mpirun).
  const bool mpi = dist::ProcessGroup::mpi_built();
  out["mpi"] = mpi ? dist::ProcessGroup::mpi_version() : "none";
  const dist::NcclInfo nccl = dist::nccl_info();
  out["nccl"]["built"] = nccl.built;
  out["nccl"]["version"] = nccl.version;
  out["nccl"]["unavailable"] = nccl.unavailable;
  const auto group = process_group();
  out["rank"] = group->rank();
  out["ranks"] = group->size();
  const CudaInfo cuda = cuda_info();
  out["cuda"]["built"] = cuda.built;
  out["cuda"]["versions"] = cuda.versions;
  out["cuda"]["architectures"] = cuda.architectures;
  out["cuda"]["unavailable"] = cuda.unavailable;
  out["cuda"]["devices"] = nlohmann::json::array();
  for (const CudaDeviceInfo& d : cuda.devices) {
    out["cuda"]["devices"].push_back({{"name", d.name},
                                      {"capability", fmt::format("{}.{}", d.major, d.minor)},
                                      {"memory_bytes", d.memory_bytes},
                                      {"multiprocessors", d.multiprocessors}});
  }
  for (const auto& [family, dtypes] : cuda.kernels) out["cuda"]["kernels"][family] = dtypes;
  if (cuda.built) out["cuda"]["fused_attention"] = cuda.fused_attention;
  if (json) {
    fmt::print("{}\n", out.dump());
    return 0;
  }
  const auto yes = [](bool b) { return b ? "yes" : "no"; };
  fmt::print("conversion kernels: {} (portable {}, avx2 {}, avx512 {}, avx512_bf16 {})\n", isa_name(active_isa()),
             "yes", yes(isa_supported(Isa::avx2)), yes(isa_supported(Isa::avx512)), yes(isa_supported(Isa::avx512_bf16)));
  fmt::print("AMX bf16 tiles: {}\n", yes(amx_bf16_usable()));
  fmt::print("data parallel: {}; this process: rank {} of {}\n",
             mpi ? "MPI (" + dist::ProcessGroup::mpi_version() + "): mpirun -np N mantissa train ..."
                 : "not built (no MPI found when it was built: install libopenmpi-dev and rebuild)",
             group->rank(), group->size());
  fmt::print("data parallel on GPUs: {}\n",
             nccl.unavailable.empty() ? "NCCL " + nccl.version + ": mpirun -np N mantissa train --device cuda ..."
             : "no: " + nccl.unavailable);
  fmt::print("threads: {}\n", omp_get_max_threads());
  fmt::print("oneDNN {}.{}.{}: the path each kernel family takes here, per dtype\n", v.major, v.minor, v.patch);
  for (OnednnPrimitive kind : kOnednnPrimitives) {
    for (DType t : kTypes) {
      fmt::print("  {:<12} {:<5} {}\n", onednn_primitive_name(kind), dtype_name(t), cpu_path(kind, t));
    }
  }
  fmt::print("fp8 products: {}\n", fp8);
  if (!cuda.built) {
    fmt::print("cuda: not built ({})\n", cuda.unavailable);
    return 0;
  }
  fmt::print("cuda: built ({}; kernels for {})\n", cuda.versions, cuda.architectures);
  for (std::size_t i = 0; i < cuda.devices.size(); ++i) {
    const CudaDeviceInfo& d = cuda.devices[i];
    fmt::print("  cuda:{} {}, compute capability {}.{}, {:.1f} GiB, {} multiprocessors\n", i, d.name, d.major, d.minor,
               static_cast<double>(d.memory_bytes) / (1 << 30), d.multiprocessors);
  }
  if (!cuda.unavailable.empty()) fmt::print("  {}\n", cuda.unavailable);
  fmt::print("  kernels on the GPU:\n");
  for (const auto& [family, dtypes] : cuda.kernels) fmt::print("    {}: {}\n", family, dtypes);
  fmt::print("  fused attention: {}\n", cuda.fused_attention);
  return 0;
}

}  // namespace

Run add_info(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "One JSON object on standard output");
  return [json] { return run_info(*json); };
}

}  // namespace mantissa::cli
