// The sources of the project, scanned for calls that must go through one home (a mechanism test: it
// fails when a path bypasses the home): every call of a name in src/, tools/, bench/ and include/
// outside the allowed files, as "path:line: statement". MANTISSA_SOURCE_DIR is the checkout's root.
// (Plain string search: std::regex trips GCC 12's -Wmaybe-uninitialized in the sanitizer build.)
#pragma once

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace mantissa::testing {

struct SourceScan {
  int files = 0;                       // how many were read (a scan that found no file proves nothing)
  std::vector<std::string> matches;  // "path:line: statement", outside the allowed files
};

// A use of `name` as a word (no identifier character just before or after it), and the statement it
// is in from there to the next ';'. `call`: only where '(' follows (after spaces).
struct Use {
  std::size_t at;
  std::string_view statement;
};
inline std::vector<Use> uses(std::string_view text, std::string_view name, bool call) {
  const auto ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  std::vector<Use> out;
  for (std::size_t at = text.find(name); at != std::string_view::npos; at = text.find(name, at + 1)) {
    const std::size_t end = at + name.size();
    if ((at > 0 && ident(text[at - 1])) || (end < text.size() && ident(text[end]))) continue;
    std::size_t next = end;
    while (next < text.size() && text[next] == ' ') ++next;
    if (call && (next == text.size() || text[next] != '(')) continue;
    const std::size_t semicolon = text.find(';', at);
    out.push_back({at, text.substr(at, (semicolon == std::string_view::npos ? text.size() : semicolon) - at)});
  }
  return out;
}

// Each use of one of `names` (called, if `call`) whose statement `wanted` accepts (all, if empty).
inline SourceScan scan_sources(const std::vector<std::string>& names, bool call, const std::set<std::string>& allowed,
                               const std::function<bool(std::string_view)>& wanted = {}) {
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
      std::stringstream buffer;
      buffer << in.rdbuf();
      const std::string s = buffer.str();
      for (const std::string& name : names) {
        for (const Use& u : uses(s, name, call)) {
          if (wanted && !wanted(u.statement)) continue;
          const auto line = 1 + std::count(s.begin(), s.begin() + static_cast<std::ptrdiff_t>(u.at), '\n');
          scan.matches.push_back(rel + ":" + std::to_string(line) + ": " + std::string(u.statement.substr(0, 120)));
        }
      }
    }
  }
  return scan;
}

}  // namespace mantissa::testing
