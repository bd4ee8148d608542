// The run's options are the library's (mantissa/train/run_options.h), which both doors fill: every flag
// of `mantissa train` is a setting of the library's table under its key, and every setting is a flag, so a
// setting added to one door without the other fails here; each row takes a value of its kind and refuses
// another, naming the setting as the door spells it; and what the library says about a run's settings
// names them by the door's spelling, not the command's flags (a source scan keeps literal flags out).
#include <gtest/gtest.h>

#include <fstream>
#include <algorithm>
#include <cctype>
#include <set>
#include <sstream>
#include <string>

#include "../unit/source_scan.h"
#include "cli_support.h"
#include "mantissa/base/errors.h"
#include "mantissa/train/config.h"
#include "mantissa/train/run_options.h"

namespace {

using mantissa::UsageError;
using mantissa::train::OptionKind;
using mantissa::train::OptionValue;
using mantissa::train::RunOptions;
using mantissa::train::Spelling;

std::string flag_of(const std::string& key) {
  std::string flag = "--" + key;
  std::replace(flag.begin(), flag.end(), '_', '-');
  return flag;
}

TEST(RunOptions, EveryTrainFlagIsALibrarySettingAndEverySettingAFlag) {
  const Result help = run("train --help");
  ASSERT_EQ(help.status, 0) << help.err;
  // The flags `train --help` lists (each at the start of its line, after the indentation).
  std::set<std::string> flags;
  std::istringstream lines(help.out);
  for (std::string line; std::getline(lines, line);) {
    std::size_t at = line.find_first_not_of(' ');
    if (at == 0 || at == std::string::npos) continue;  // section titles start at the margin
    if (line.compare(at, 1, "-") == 0 && line.compare(at, 2, "--") != 0 && line.size() > at + 3 && line[at + 2] == ',') at += 3;
    if (line.compare(at, 2, "--") != 0 || line.size() <= at + 2 || !std::islower(static_cast<unsigned char>(line[at + 2]))) continue;
    const std::size_t end = line.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-", at + 2);
    flags.insert(line.substr(at, end - at));
  }
  // The command's own: where its records go, not what the run does.
  for (const char* own : {"--help", "--metrics", "--metrics-append", "--json", "--plan-out", "--telemetry", "--follow-symlinks"}) {
    EXPECT_EQ(flags.erase(own), 1u) << own << " is no longer a flag of train: update this list";
  }
  std::set<std::string> settings;
  for (const auto& row : mantissa::train::run_option_table()) settings.insert(flag_of(row.key));
  for (const std::string& f : flags) EXPECT_TRUE(settings.count(f)) << f << ": a flag of train that is no setting of the library's run options";
  for (const std::string& s : settings) EXPECT_TRUE(flags.count(s)) << s << ": a setting of the library's run options that train does not take";
}

// A value of each kind, and one of another kind for it.
OptionValue good_value(OptionKind kind) {
  switch (kind) {
    case OptionKind::integer: return std::int64_t{1};
    case OptionKind::real: return 0.5;
    case OptionKind::flag:
    case OptionKind::on_off: return true;
    case OptionKind::text: return std::string("x");
    case OptionKind::list: return std::vector<std::string>{"fc0"};
  }
  return {};
}
OptionValue wrong_value(OptionKind kind) {
  return kind == OptionKind::flag || kind == OptionKind::on_off ? OptionValue(std::int64_t{1}) : OptionValue(true);
}

TEST(RunOptions, EachSettingTakesItsKindAndRefusesAnotherNamingItAsTheDoorSpellsIt) {
  for (const auto& row : mantissa::train::run_option_table()) {
    for (const Spelling spelling : {Spelling::flags, Spelling::keywords}) {
      RunOptions o;
      o.spelling = spelling;
      const std::string name = spelling == Spelling::flags ? flag_of(row.key) : row.key;
      try {
        mantissa::train::set_run_option(o, row.key, wrong_value(row.kind));
        ADD_FAILURE() << row.key << " took a value of another kind";
      } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(name + ": ", 0), 0u) << e.what();
      }
      // A value of its kind: taken, or (a name or list item the setting does not know) refused naming the setting.
      try {
        mantissa::train::set_run_option(o, row.key, good_value(row.kind));
      } catch (const UsageError& e) {
        EXPECT_EQ(std::string(e.what()).rfind(name + ": ", 0), 0u) << e.what();
        EXPECT_TRUE(row.kind == OptionKind::text || row.kind == OptionKind::list) << row.key << ": " << e.what();
      }
    }
  }
  RunOptions o;
  EXPECT_THROW(mantissa::train::set_run_option(o, "stepz", std::int64_t{1}), UsageError);
  mantissa::train::set_run_option(o, "fp32_layers", std::string("fc0,fc1"));  // the command's comma form
  EXPECT_EQ(o.precision.f32_layers, (std::vector<std::string>{"fc0", "fc1"}));
  mantissa::train::set_run_option(o, "lr", std::int64_t{2});  // an integer is a number
  EXPECT_EQ(o.lr, 2.0);
}

TEST(RunOptions, TheLibrarysChecksNameSettingsAsTheDoorSpellsThem) {
  RunOptions o;
  o.batch_size = 0;
  for (const auto& [spelling, says] : {std::pair{Spelling::flags, "--batch-size must be in 1.."}, std::pair{Spelling::keywords, "batch_size must be in 1.."}}) {
    o.spelling = spelling;
    try {
      mantissa::train::check_run_options(o);
      ADD_FAILURE() << "batch size 0 passed";
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind(says, 0), 0u) << e.what();
    }
  }
  RunOptions k;
  k.spelling = Spelling::keywords;
  k.precision_name = "bf17";
  try {
    mantissa::train::resolve_precision(k);
    ADD_FAILURE() << "bf17 resolved";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("precision 'bf17' is not fp32", 0), 0u) << e.what();
  }
}

// The files that word what the library and the run say about settings spell no flag themselves: each name
// goes through RunOptions::name. (training.cpp's checkpoint signature keys are a file format, "--lr": they
// are the one exception, and are said through the door's spelling when a resume is refused.)
// Every list a setting takes is split by comma_words, which keeps empty words for the setting to refuse
// ("--precisions bf16," names the empty one instead of dropping it); no other splitter of commas (a
// getline or a find on ',') in the sources (but MPI's version string, cut at its first comma: no setting).
TEST(RunOptions, ListsAreSplitByCommaWordsAlone) {
  EXPECT_EQ(mantissa::train::comma_words("bf16,fp16"), (std::vector<std::string>{"bf16", "fp16"}));
  EXPECT_EQ(mantissa::train::comma_words("bf16,"), (std::vector<std::string>{"bf16", ""}));
  EXPECT_EQ(mantissa::train::comma_words(""), (std::vector<std::string>{""}));
  EXPECT_EQ(mantissa::train::comma_words(",a,,b"), (std::vector<std::string>{"", "a", "", "b"}));
  const mantissa::testing::SourceScan scan = mantissa::testing::scan_sources({"getline", "find"}, true,
                                                                   {"src/train/config.cpp", "src/dist/mpi_group.cpp"},
                                                         [](std::string_view s) { return s.find("',')") != std::string_view::npos || s.find("',',") != std::string_view::npos; });
  EXPECT_GT(scan.files, 100);
  for (const std::string& m : scan.matches) ADD_FAILURE() << m << " (split settings' lists with train::comma_words)";
}

TEST(RunOptions, MessagesAboutSettingsSpellNoFlagLiterally) {
  // A string literal that begins with a flag: "--x.
  const auto literal_flag = [](const std::string& line) {
    for (std::size_t at = line.find("\"--"); at != std::string::npos; at = line.find("\"--", at + 1)) {
      if (at + 3 < line.size() && std::islower(static_cast<unsigned char>(line[at + 3]))) return true;
    }
    return false;
  };
  for (const char* file : {"src/train/run_options.cpp", "tools/mantissa/settings_agreement.cpp", "tools/mantissa/training.cpp"}) {
    std::ifstream in(std::string(MANTISSA_SOURCE_DIR) + "/" + file);
    ASSERT_TRUE(in) << file;
    int n = 0;
    bool in_signature = false;
    for (std::string line; std::getline(in, line);) {
      ++n;
      // The signature's keys (the checkpoint's format) are written in the functions that build it.
      if (line.find("Signature signature(") == 0 || line.find("train::RunSettings rank_settings(") == 0 ||
          line.find("void check_signature(") == 0) {
        in_signature = true;
      }
      if (in_signature && line == "}") in_signature = false;
      if (in_signature || (line.find("//") != std::string::npos && line.find("//") < line.find("\"--"))) continue;
      EXPECT_FALSE(literal_flag(line)) << file << ":" << n << ": a flag spelled in a message: " << line;
    }
  }
}

}  // namespace
