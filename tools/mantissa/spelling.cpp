// One spelling per concept (see spelling.h).
#include "spelling.h"

#include <stdexcept>

#include "output_file.h"

namespace mantissa::cli {

bool parse_on_off(const std::string& flag, const std::string& value) {
  if (value == "on") return true;
  if (value == "off") return false;
  if (value == "1" || value == "0") {
    progress("note: %s %s is the old spelling: %s %s\n", flag.c_str(), value.c_str(), flag.c_str(), value == "1" ? "on" : "off");
    return value == "1";
  }
  throw std::invalid_argument(flag + ": '" + value + "' is not on or off");
}

void add_on_off_option(CLI::App& app, const std::string& flag, bool& value, const std::string& description) {
  app.add_option_function<std::string>(
         flag,
         [flag, &value](const std::string& v) {
           try {
             value = parse_on_off(flag, v);
           } catch (const std::invalid_argument& e) {
             throw CLI::ValidationError(e.what());  // the parser's error: one line, status 2
           }
         },
         description)
      ->default_str(value ? "on" : "off");
}

void add_old_spelling(CLI::App& app, const std::string& old_name, const std::string& current, std::string& value) {
  app.add_option(old_name, value)
      ->group("")
      ->each([old_name, current](const std::string&) { progress("note: %s is the old spelling of %s\n", old_name.c_str(), current.c_str()); });
}

}  // namespace mantissa::cli
