// Settings that contradict each other or would do nothing are refused when a run starts, naming the
// flag and why: --epochs with --steps, a warm-up longer than the run or an injection step past it, a
// batch larger than the data, labels of one class, a loss-scale floor above its start, and a flag for
// something the run does not do (an FP8 setting without FP8, --momentum with Adam, a GPT size for the
// MLP, a data-parallel setting on one rank). An interval past the run's end (--eval-every,
// --checkpoint-every, --update-stats-every) is harmless, and may mean a run trained in parts: it is
// named, not refused. Only flags the user gave count: a default never contradicts. (Per-command ones,
// such as a precision given twice to compare, are the command's.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "training.h"

namespace mantissa::cli {

// What the run found out before training: the data and the process group.
struct RunFacts {
  std::string data;                  // the data's path, for messages
  std::int64_t train_images = 0;     // 0 for text
  bool labels_single_class = false;  // every training label the same (a classifier's data)
  bool dynamic_scaling = false;      // --loss-scale dynamic (given, or fp16's default): the --init-scale ... knobs apply
  int ranks = 1;
};

// Throws UsageError naming (as the door spells it) the first setting that contradicts another or does nothing; returns
// the notes to print for the harmless ones.
std::vector<std::string> check_agreement(const RunOptions& c, const RunFacts& run);

}  // namespace mantissa::cli
