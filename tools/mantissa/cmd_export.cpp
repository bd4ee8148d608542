// `mantissa export CHECKPOINT --to pytorch OUT.safetensors`: a checkpoint's weights as a PyTorch
// state_dict (safetensors, PyTorch's names, fp32 or bf16), for the PyTorch twins or a user's own model
// of the same shape; docs/interop.md.
#include <fmt/format.h>

#include <memory>

#include "commands.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/io/weights.h"
#include "output_flags.h"

namespace mantissa::cli {
namespace {

struct ExportArgs {
  std::string checkpoint, to = "pytorch", out, dtype = "fp32";
};

int run_export(const ExportArgs& a) {
  if (a.to != "pytorch") throw std::invalid_argument("--to: '" + a.to + "' is not a format mantissa exports to (pytorch)");
  if (a.dtype != "fp32" && a.dtype != "bf16") throw std::invalid_argument("--dtype: '" + a.dtype + "' is not fp32 or bf16");
  const auto weights = checkpoint_weights(a.checkpoint, a.dtype == "bf16" ? DType::bf16 : DType::f32);
  // {"format": "pt"}: what safetensors.torch.save_file writes, so its load_file takes it as PyTorch's.
  write_safetensors(a.out, weights, {{"format", "pt"}, {"source", a.checkpoint}});
  fmt::print("{}: {} tensors of {} in {}, PyTorch's names\n", a.out, weights.size(), a.checkpoint, a.dtype);
  return 0;
}

}  // namespace

Run add_export(CLI::App& app) {
  auto a = std::make_shared<ExportArgs>();
  app.add_option("checkpoint", a->checkpoint, "A checkpoint (ckpt-N.safetensors) of mantissa train")->required();
  app.add_option("--to", a->to, "The format: pytorch (a state_dict in safetensors)")->capture_default_str();
  add_output_file(app, "out,--out", a->out, "Where to write it (OUT.safetensors)")->required();
  app.add_option("--dtype", a->dtype, "fp32 or bf16")->capture_default_str();
  return [a] { return run_export(*a); };
}

}  // namespace mantissa::cli
