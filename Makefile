# A thin wrapper over CMake: installs what is missing, configures a Release build in build/, and runs
# the main job or the tests. The build treats warnings as errors.
BUILD ?= build
JOBS ?= $(shell nproc)

.PHONY: all deps configure build demo test sanitize bench install clean

all: build

deps:
	@scripts/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DMANTISSA_WERROR=ON >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

# The main job: the residual CNN trained on Fashion-MNIST (Debian's dataset-fashion-mnist) in fp32, bf16
# and fp16 with dynamic loss scaling, side by side, with the loss curves drawn to an SVG file (a few
# minutes on 2 cores; bench/quality.sh trains longer, to the accuracies in docs/results.md).
demo: build
	@$(BUILD)/bin/mantissa compare --model cnn --steps 150 --batch-size 128 --lr 3e-3 --warmup 20 --eval-every 150 \
	  --plot mantissa-compare.svg

test: build
	@ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS)

# The whole suite (both CPU variants) built with AddressSanitizer and UndefinedBehaviorSanitizer in
# build-asan/; any finding, leaks included, fails the case. CI runs it after `make test`. (The installed-
# package test is left out: its outside project is built without the sanitizers.)
SANITIZE := -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
sanitize: deps
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMANTISSA_WERROR=ON -DMANTISSA_BUILD_BENCHMARKS=OFF \
	  -DCMAKE_CXX_FLAGS="$(SANITIZE)" -DCMAKE_EXE_LINKER_FLAGS="$(SANITIZE)" -DCMAKE_SHARED_LINKER_FLAGS="$(SANITIZE)" >/dev/null
	@cmake --build build-asan -j $(JOBS)
	@ctest --test-dir build-asan --output-on-failure -j $(JOBS) -E '^install\.'

bench: build
	@$(BUILD)/bin/bench_convert

install: build
	@cmake --install $(BUILD)

clean:
	@rm -rf $(BUILD)
