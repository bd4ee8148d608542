// The sources of the project, scanned for calls that must go through one home (a mechanism test: it
// fails when a path bypasses the home): every match of a pattern in src/, tools/, bench/ and include/
// outside the allowed files, as "path:line: text". MANTISSA_SOURCE_DIR is the checkout's root.
#pragma once

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace mantissa::testing {

struct SourceScan {
  int files = 0;                       // how many were read (a scan that found no file proves nothing)
  std::vector<std::string> matches;  // "path:line: text", outside the allowed files
};

// allowed: paths relative to the root ("src/backend/cuda/cuda_runtime.cu").
inline SourceScan scan_sources(const std::regex& pattern, const std::set<std::string>& allowed) {
  const std::filesystem::path root = MANTISSA_SOURCE_DIR;
  SourceScan scan;
  for (const char* dir : {"src", "tools", "bench", "include"}) {
    if (!std::filesystem::exists(root / dir)) continue;
    for (const auto& entry : std::filesystem::recursive_directory_iterator(root / dir)) {
      const std::string ext = entry.path().extension().string();
      if (!entry.is_regular_file() || (ext != ".cu" && ext != ".cuh" && ext != ".cpp" && ext != ".h")) continue;
      ++scan.files;
      const std::string rel = entry.path().lexically_relative(root).string();
      if (allowed.count(rel) > 0) continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string s = text.str();
      for (auto it = std::sregex_iterator(s.begin(), s.end(), pattern); it != std::sregex_iterator(); ++it) {
        const auto line = 1 + std::count(s.begin(), s.begin() + it->position(), '\n');
        scan.matches.push_back(rel + ":" + std::to_string(line) + ": " + it->str());
      }
    }
  }
  return scan;
}

}  // namespace mantissa::testing
