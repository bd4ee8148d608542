// The `mantissa` command: parses the subcommand and its flags, runs it, and turns every error into one
// line on standard error: exit status 2 for a bad flag or input (a value, a file to read that is not
// one or holds bad data or a bad checkpoint, an output path that cannot be written), 3 for a training
// run stopped because it stalled (--stop-on-stall), 1 for a failure on the way (a failed write, standard
// output included; a lost rank).
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <new>
#include <string>

#include "interrupt.h"
#include "machine.h"
#include "suggest.h"
#include "commands.h"
#include "mantissa/core/input_file.h"
#include "mantissa/data/datasets.h"
#include "mantissa/io/safetensors.h"
#include "mantissa/numeric/bulk.h"
#include "number_flags.h"
#include "output_flags.h"
#include "training.h"

namespace {

// Under mpirun every rank runs the command: rank 0 alone prints (the others' standard output goes to
// /dev/null), an error names its rank, and a rank that fails ends the whole job at once rather than leave
// the others waiting for it.
std::shared_ptr<mantissa::dist::ProcessGroup> world;

int fail(int status, const char* prefix, const char* what) {
  if (world && world->size() > 1) {
    std::fprintf(stderr, "mantissa: rank %d: %s%s\n", world->rank(), prefix, what);
    world->abort(status);
  }
  std::fprintf(stderr, "mantissa: %s%s\n", prefix, what);
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  mantissa::cli::route_stop_signals();  // before any thread exists (interrupt.h)
  CLI::App app{"mantissa: mixed-precision training of neural networks"};
  app.set_version_flag("--version", std::string("mantissa ") + mantissa::cli::version());
  app.require_subcommand(1);
  std::map<CLI::App*, mantissa::cli::Run> runs;
  auto add = [&](const char* name, const char* about, auto adder) {
    CLI::App* sub = app.add_subcommand(name, about);
    runs[sub] = adder(*sub);
  };
  add("formats", "Print the properties of every number format", mantissa::cli::add_formats);
  add("cast", "Round fp32 values read from standard input into a format", mantissa::cli::add_cast);
  add("train", "Train a model (mlp, cnn, segment, gpt, lstm) on real data in fp32, bf16 or fp16", mantissa::cli::add_train);
  add("compare", "Train the same model in several precisions and compare them side by side", mantissa::cli::add_compare);
  add("paper", "The mixed-precision paper's experiments: each model in fp32, bf16, fp16 with and without loss scaling "
               "and master weights, as a table (--suite nvfp4: NVFP4's recipe part by part)", mantissa::cli::add_paper);
  add("inspect", "Summarize a run's numerics telemetry: tensors closest to underflow and overflow, the gradient histogram",
      mantissa::cli::add_inspect);
  add("export", "A checkpoint's weights as a PyTorch state_dict (safetensors): mantissa export CKPT --to pytorch OUT",
      mantissa::cli::add_export);
  add("info", "What this machine's kernels can do: instruction sets, AMX, oneDNN's dtypes", mantissa::cli::add_info);
  add("bench", "Benchmarks: whole training steps per precision (--model), matmul against the measured peak, an MLP step", mantissa::cli::add_bench);
  mantissa::cli::route_number_flags(app);  // every numeric flag through the library's one parser

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::fputs(app.help().c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    // Subcommand help comes through here too, with exit code 0.
    if (e.get_exit_code() == 0) return app.exit(e);
    std::fprintf(stderr, "mantissa: %s\n", mantissa::cli::explain_parse_error(app, e, argc, argv).c_str());
    return mantissa::cli::kBadInput;
  }
  // The environment the kernels read, as the flags are: a cap on the instruction sets that names none.
  if (const std::string problem = mantissa::isa_setting_problem(); !problem.empty()) {
    std::fprintf(stderr, "mantissa: %s\n", problem.c_str());
    return mantissa::cli::kBadInput;
  }
  // What a command printed must have reached standard output (a full disk, a closed pipe): else fail.
  const auto flushed = [](int status) {
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      std::fprintf(stderr, "mantissa: writing standard output failed: %s\n", std::strerror(errno));
      return status == 0 ? 1 : status;
    }
    return status;
  };
  try {
    if (mantissa::dist::ProcessGroup::launched_by_mpi()) {
      world = mantissa::cli::process_group();
      if (world->rank() != 0 && std::freopen("/dev/null", "w", stdout) == nullptr) return 1;
    }
    for (CLI::App* sub : app.get_subcommands()) {
      mantissa::cli::check_output_flags(*sub);  // every output path, before any work
      return flushed(runs.at(sub)());
    }
  } catch (const mantissa::train::TrainingStalled& e) {  // --stop-on-stall: a distinct status
    return fail(mantissa::cli::kStalled, "stopped: ", e.what());
  } catch (const mantissa::LossScaleCollapse& e) {
    return fail(mantissa::cli::kStalled, "stopped: ", e.what());
  } catch (const std::invalid_argument& e) {  // a bad flag value or output path: a usage error
    return fail(mantissa::cli::kBadInput, "", e.what());
  } catch (const mantissa::InputFileError& e) {  // a file the user named that is not one to read
    return fail(mantissa::cli::kBadInput, "", e.what());
  } catch (const mantissa::DataError& e) {  // data that is not what it should be
    return fail(mantissa::cli::kBadInput, "", e.what());
  } catch (const mantissa::CheckpointError& e) {  // a checkpoint (or safetensors file) that cannot be used
    return fail(mantissa::cli::kBadInput, "", e.what());
  } catch (const mantissa::cli::Interrupted& e) {  // a signal stopped the run at a step boundary: 130 or 143
    return fail(e.status(), "", e.what());
  } catch (const std::bad_alloc&) {
    return fail(1, "", "out of memory (the sizes asked for need more than this machine has)");
  } catch (const std::exception& e) {  // a failed write, a rank lost, ...
    return fail(1, "", e.what());
  }
  return 0;
}
