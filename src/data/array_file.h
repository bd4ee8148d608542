// Array files read from a file already open: read_array opens each image or label file once, looks at
// its first bytes and hands the same descriptor to the reader of its kind (idx.cpp, npy.cpp).
#pragma once

#include <filesystem>
#include <string_view>

#include "mantissa/core/input_file.h"
#include "mantissa/data/datasets.h"

namespace mantissa::detail {

// The path opened as an array file (kind names it in errors; the limit is kMaxIdxBytes), a refusal (no
// such file, not a regular file, too large) a DataError.
InputFile open_array_file(const std::filesystem::path& path, std::string_view kind);
// The readers, from the file's start.
IdxArray read_idx(InputFile&& in);
IdxArray read_npy(InputFile&& in);

}  // namespace mantissa::detail
