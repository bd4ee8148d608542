// `mantissa bench --model ...`: training steps of a whole model timed per precision (bench_model.cpp).
#pragma once

#include <cstdint>
#include <string>

namespace mantissa::cli {

struct ModelBenchArgs {
  std::string model;                                // gpt-small, gpt-wide, gpt2-124m, cnn
  std::string precision = "fp32,bf16,fp16";         // comma-separated
  std::string mode = "autocast,low-precision-model";  // comma-separated
  std::string fp8_recipe = "delayed";               // for precision fp8; comma-separated
  std::string numerics = "off";                     // off, trace, telemetry (every step); comma-separated
  std::string fp32_ops = "default";                 // as train's --fp32-ops, for every low precision
  std::string fp8_format = "hybrid";
  std::int64_t amax_history = 1024;
  int fp8_margin = 0;
  int threads = 0;
  int steps = 10, warmup = 3;
  bool json = false;
  std::string data;         // default: the fortunes (gpt) or Fashion-MNIST (cnn)
  std::string export_path;  // write the initial weights and first batch here (safetensors)
  std::uint64_t seed = 0;
  std::string device = "cpu";  // cpu or cuda
  bool tf32 = false;           // on the GPU: f32 products on TF32 tensor cores
  // Data parallel (under mpirun): every rank trains on batch_size rows (the global batch is ranks times
  // that), its gradients sent in this format, overlapped with backward or not.
  std::string grad_reduce = "f32";
  bool overlap = true;
  double bucket_mb = 1;
  // Shapes; 0 takes the model's preset.
  std::int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0, batch_size = 0, width = 0, vocab = 0;
  std::string gelu = "erf";  // gpt: erf or tanh (GPT-2's form)
};

int run_model_bench(ModelBenchArgs args);

}  // namespace mantissa::cli
