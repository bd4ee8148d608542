// Training checkpoints: what a run needs to continue exactly where it stopped, in a safetensors file
// (model weights and buffers under "model/", f32 master weights and optimizer state under "optim/",
// everything else as metadata: step, loss-scaler state, data position, RNG state, configuration).
// Python's safetensors reads them; tests/io/check_checkpoint.py checks one without mantissa.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "mantissa/amp/loss_scaler.h"
#include "mantissa/nn/module.h"
#include "mantissa/optim/optimizer.h"

namespace mantissa {

struct CheckpointState {
  std::int64_t step = 0;
  LossScalerState scaler;
  std::map<std::string, std::string> extra;  // data position, RNG state, configuration
};

void save_checkpoint(const std::filesystem::path& path, const nn::Module& model, const Optimizer& optimizer,
                     const CheckpointState& state);
// The shortest decimal that reads back as the same double (for metadata and messages).
std::string exact_number(double v);

// Metadata field `key` of the checkpoint at `path` as an integer, or a CheckpointError naming the file,
// the field and what it holds instead.
std::int64_t metadata_integer(const std::filesystem::path& path, const std::map<std::string, std::string>& meta,
                              const std::string& key);

// Loads into an already built model and optimizer; throws CheckpointError naming the file and the
// tensor or field that does not fit. `check`, when given, sees the metadata first (and may throw), so a
// run with other settings is told which setting differs rather than which tensor.
CheckpointState load_checkpoint(const std::filesystem::path& path, nn::Module& model, Optimizer& optimizer,
                                const std::function<void(const std::map<std::string, std::string>&)>& check = {});

// ckpt-<step>.safetensors in dir, newest last.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& dir);
std::filesystem::path checkpoint_path(const std::filesystem::path& dir, std::int64_t step);
// Deletes all but the newest `keep` of those up to `newest`, the one just written; newer ones (left by a
// run that went further: a damaged one a resume passed over) are left to be overwritten, never counted, so
// they cannot cost the checkpoint just written.
void prune_checkpoints(const std::filesystem::path& dir, int keep, const std::filesystem::path& newest);
// The newest checkpoint in dir that reads whole (every field and tensor checked as loading does), or
// nullopt when none does; `on_skip` hears of each newer one that did not, with why. (What a checkpoint
// holds is checked against the run when it is loaded: a checkpoint of other settings is not skipped.)
std::optional<std::filesystem::path> newest_readable_checkpoint(
    const std::filesystem::path& dir, const std::function<void(const std::filesystem::path&, const std::string& why)>& on_skip = {});

}  // namespace mantissa
