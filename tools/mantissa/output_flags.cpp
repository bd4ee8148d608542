// Output flags and their checks before a command runs (output_flags.h).
#include "output_flags.h"

#include "mantissa/core/output_file.h"

namespace mantissa::cli {
namespace {

constexpr const char* kOutFile = "OUT_FILE";
constexpr const char* kAppendFile = "APPEND_FILE";
constexpr const char* kOutDir = "OUT_DIR";
constexpr const char* kOutPrefix = "OUT_PREFIX";

CLI::Option* add(CLI::App& app, const std::string& name, std::string& path, const std::string& about, const char* kind) {
  return app.add_option(name, path, about)->type_name(kind);
}

}  // namespace

CLI::Option* add_output_file(CLI::App& app, const std::string& name, std::string& path, const std::string& about) {
  return add(app, name, path, about, kOutFile);
}

CLI::Option* add_append_file(CLI::App& app, const std::string& name, std::string& path, bool& follow, const std::string& about) {
  if (app.get_option_no_throw("--follow-symlinks") == nullptr) {
    app.add_flag("--follow-symlinks", follow, "Append to a file named through a symbolic link (refused otherwise)");
  }
  return add(app, name, path, about, kAppendFile);
}

CLI::Option* add_output_dir(CLI::App& app, const std::string& name, std::string& path, const std::string& about) {
  return add(app, name, path, about, kOutDir);
}

CLI::Option* add_output_prefix(CLI::App& app, const std::string& name, std::string& path, const std::string& about) {
  return add(app, name, path, about, kOutPrefix);
}

void check_output_flags(const CLI::App& command) {
  const CLI::Option* follow = command.get_option_no_throw("--follow-symlinks");
  for (const CLI::Option* opt : command.get_options()) {
    const std::string kind = opt->get_type_name();
    if (kind != kOutFile && kind != kAppendFile && kind != kOutDir && kind != kOutPrefix) continue;
    const std::string path = opt->as<std::string>();  // given, or the default
    if (path.empty() && opt->count() == 0) continue;  // not asked for
    bool excluded = false;  // --no-plot given: the default path is not written
    for (const CLI::Option* other : opt->get_excludes()) excluded = excluded || other->count() > 0;
    if (excluded) continue;
    const std::string flag = opt->get_name();
    if (kind == kOutFile) check_output_file(path, flag);
    if (kind == kAppendFile) check_append_file(path, flag, follow != nullptr && follow->count() > 0);
    if (kind == kOutDir) check_output_directory(path, flag);
    if (kind == kOutPrefix) check_output_file(path.empty() ? path : path + "-<name>.svg", flag);
  }
  for (const CLI::App* sub : command.get_subcommands()) check_output_flags(*sub);
}

}  // namespace mantissa::cli
