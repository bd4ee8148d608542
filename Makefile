# A thin wrapper over CMake: installs what is missing, configures a Release build in build/, and runs
# the main job or the tests. The build treats warnings as errors.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure build demo test bench install clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WERROR=ON >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job. Until training lands it shows the formats and what rounding does to a few values.
demo: build
	@$(BUILD)/bin/mantissa formats
	@echo
	@echo "0.1, pi, 1e-6, 70000 and 448.5 rounded to bf16, fp16 and e4m3 (input, rounded, bits):"
	@for f in bf16 fp16 e4m3; do \
	  echo "-- $$f"; printf '0.1\n3.14159265\n1e-6\n70000\n448.5\n' | $(BUILD)/bin/mantissa cast --to $$f; \
	done

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

bench: build
	@$(BUILD)/bin/bench_convert

install: build
	@cmake --install $(BUILD)

clean:
	@rm -rf $(BUILD)
