// `mantissa info`: what this machine's kernels can do, so a user knows which paths their numbers came
// from: conversion kernel levels, AMX, and which dtypes oneDNN implements here (and the fallbacks).
#include <fmt/format.h>
#include <omp.h>

#include <nlohmann/json.hpp>

#include "commands.h"
#include "mantissa/numeric/bulk.h"
#include "mantissa/ops/backend_select.h"
#include "peak_flops.h"

namespace mantissa::cli {
namespace {

int run_info(bool json) {
  const CpuCapabilities c = cpu_capabilities();
  nlohmann::json out;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_bf16}) {
    out["conversion_kernels"][std::string(isa_name(isa))] = isa_supported(isa);
  }
  out["conversion_kernels_active"] = std::string(isa_name(active_isa()));
  out["amx_bf16"] = amx_bf16_usable();
  out["threads"] = omp_get_max_threads();
  out["onednn_version"] = fmt::format("{}.{}.{}", c.onednn_major, c.onednn_minor, c.onednn_patch);
  out["onednn_matmul"] = {{"f32", c.matmul_f32}, {"bf16", c.matmul_bf16}, {"f16", c.matmul_f16}};
  out["onednn_conv"] = {{"f32", c.conv_f32}, {"bf16", c.conv_bf16}, {"f16", c.conv_f16}};
  if (json) {
    fmt::print("{}\n", out.dump());
    return 0;
  }
  const auto yes = [](bool b) { return b ? "yes" : "no"; };
  fmt::print("conversion kernels: {} (portable {}, avx2 {}, avx512 {}, avx512_bf16 {})\n", isa_name(active_isa()),
             "yes", yes(isa_supported(Isa::avx2)), yes(isa_supported(Isa::avx512)), yes(isa_supported(Isa::avx512_bf16)));
  fmt::print("AMX bf16 tiles: {}\n", yes(amx_bf16_usable()));
  fmt::print("threads: {}\n", omp_get_max_threads());
  fmt::print("oneDNN {}.{}.{}\n", c.onednn_major, c.onednn_minor, c.onednn_patch);
  fmt::print("  matmul: f32 {}, bf16 {}, f16 {}{}\n", yes(c.matmul_f32), yes(c.matmul_bf16), yes(c.matmul_f16),
             c.matmul_f16 ? "" : "  (f16: converted to f32 block by block, rounded once)");
  fmt::print("  conv:   f32 {}, bf16 {}, f16 {}{}\n", yes(c.conv_f32), yes(c.conv_bf16), yes(c.conv_f16),
             c.conv_f16 ? "" : "  (f16: through f32 copies, rounded once)");
  return 0;
}

}  // namespace

Run add_info(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  app.add_flag("--json", *json, "One JSON object on standard output");
  return [json] { return run_info(*json); };
}

}  // namespace mantissa::cli
