// Weights as PyTorch keeps them: a state_dict in a safetensors file (safetensors.torch.save_file), each
// tensor under its parameter's or buffer's name. mantissa's models name their parameters and buffers as
// the PyTorch twins in bench/pytorch/models.py do (docs/interop.md has the table), so a state_dict moves
// both ways without renaming: exported from a checkpoint, loaded to start a run.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "mantissa/core/dtype.h"
#include "mantissa/core/tensor.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/nn/module.h"

namespace mantissa {

// Whether a buffer is mantissa's own state, which a PyTorch model has no place for: the FP8 recipes'
// scales, histories and rounding counts (fp8_*).
bool is_mantissa_state(const std::string& name);

// A checkpoint's weights by PyTorch's names: its model tensors (parameters and buffers, not the FP8
// state or the optimizer's), cast to `dtype` (f32 or bf16). Throws CheckpointError for a file that is
// not a checkpoint, std::invalid_argument for another dtype.
std::vector<std::pair<std::string, Tensor>> checkpoint_weights(const std::filesystem::path& checkpoint, DType dtype);
// The same of a checkpoint already read (`checkpoint` names it in errors).
std::vector<std::pair<std::string, Tensor>> checkpoint_weights(const Safetensors& file, const std::filesystem::path& checkpoint,
                                                                DType dtype);

// Loads a state_dict file into the model's parameters and buffers (not its FP8 state), as PyTorch's
// load_state_dict(strict=True) does: every one must be there with its shape and nothing else may be
// (num_batches_tracked aside, which mantissa's batch norm does not count); values are cast to each
// tensor's dtype and must be finite. Throws CheckpointError naming the file and each tensor that differs.
void load_weights(nn::Module& model, const std::filesystem::path& path);
// The same from tensors in memory (the Python module's load_state_dict), named `where` in errors.
void load_weights(nn::Module& model, const std::vector<std::pair<std::string, Tensor>>& weights, const std::string& where);

// A model's weights by PyTorch's names: its parameters, then its buffers but the FP8 state (the tensors
// themselves, not copies).
std::vector<std::pair<std::string, Tensor>> model_weights(const nn::Module& model);

}  // namespace mantissa
