// The ranges of training's real-valued settings, by what each means: a value outside cannot train (or
// means nothing: a learning rate of 1e300, a weight decay of 1e300), so it is refused where it enters,
// never run. One declaration each; the command's check (tools/mantissa/training.cpp's real_settings), and
// the Python module through it, use these. The loss scaler's own are beside it
// (mantissa/amp/loss_scaler.h, loss_scale_ranges), where the checkpoint reader checks a resumed scale.
#pragma once

#include "mantissa/base/value_range.h"

namespace mantissa::train::ranges {

inline constexpr ValueRange kLearningRate{0, 10, true, false, false, "in (0, 10]"};
inline constexpr ValueRange kWeightDecay{0, 1, false, false, false, "in [0, 1]"};
inline constexpr ValueRange kMomentum{0, 1, false, true, false, "in [0, 1)"};
inline constexpr ValueRange kClip{0x1p-40, 0x1p40, false, false, true, "0 (no clipping) or in [2^-40, 2^40]"};
inline constexpr ValueRange kLossWeight{0x1p-40, 0x1p40, false, false, false, "in [2^-40, 2^40]"};
// --normalize MEAN,STD: of pixels on a 0..1 scale, so both within it (a std of 1e-300 made every input inf).
inline constexpr ValueRange kPixelMean{0, 1, false, false, false, "in [0, 1] (pixels on a 0..1 scale)"};
inline constexpr ValueRange kPixelStd{0x1p-10, 1, false, false, false, "in [2^-10, 1] (pixels on a 0..1 scale)"};
inline constexpr ValueRange kCheckpointMinutes{0, 1e6, false, false, false, "at least 0 (0: by steps only) and at most 1e6"};
inline constexpr ValueRange kBucketMiB{0, 1 << 20, true, false, false, "positive (MiB) and at most 2^20"};
inline constexpr ValueRange kDistTimeout{0, 1e9, false, false, false, "at least 0 (0: wait forever) and at most 1e9 seconds"};

}  // namespace mantissa::train::ranges
