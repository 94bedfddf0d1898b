#!/usr/bin/env bash
# Installs what fp4moe needs to build and test, and nothing that is already there.
# Idempotent: when everything is present it prints nothing and exits 0.
#   Debian packages: compiler, CMake, GoogleTest, CLI11, nlohmann-json; clang with its runtime
#   (libFuzzer, ASan, UBSan) for the parser fuzz test.
#   PyPI packages (pinned): the independent oracles some tests call (ml_dtypes, numpy,
#   safetensors), matplotlib for scripts/plot_bench.py, and cuobjdump with the nvdisasm it runs
#   for -sass (the toolkit here has neither) for the SASS checks of
#   scripts/check_wgmma_serialization.sh.
set -euo pipefail

DEBIAN_PACKAGES=(g++ cmake make python3 python3-pip googletest libgtest-dev libcli11-dev
                 nlohmann-json3-dev clang libclang-rt-dev)
PYTHON_PACKAGES=("numpy==2.2.6" "ml_dtypes==0.5.3" "safetensors==0.6.2" "matplotlib==3.10.7"
                 "nvidia-cuda-cuobjdump==13.5.37" "nvidia-cuda-nvdisasm==13.5.37")

missing=()
for p in "${DEBIAN_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A toolchain installed outside dpkg (pyenv's python3, a newer cmake) counts as present.
filtered=()
for p in "${missing[@]}"; do
  case "$p" in
    python3|cmake|make|g++) command -v "$p" >/dev/null 2>&1 && continue ;;
    python3-pip) python3 -m pip --version >/dev/null 2>&1 && continue ;;
  esac
  filtered+=("$p")
done
if ((${#filtered[@]})); then
  echo "install_deps: installing Debian packages: ${filtered[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq --no-install-recommends \
    "${filtered[@]}" >/dev/null
fi

py_missing=$(python3 - "${PYTHON_PACKAGES[@]}" <<'PY'
import sys
from importlib import metadata
out = []
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    try:
        if metadata.version(name) != want:
            out.append(spec)
    except metadata.PackageNotFoundError:
        out.append(spec)
print(" ".join(out))
PY
)
if [ -n "$py_missing" ]; then
  echo "install_deps: installing Python packages: $py_missing"
  # Debian's own python refuses system-wide pip installs (PEP 668); a user install is fine.
  flags=(-q --disable-pip-version-check)
  python3 -m pip install "${flags[@]}" $py_missing 2>/dev/null ||
    python3 -m pip install "${flags[@]}" --user --break-system-packages $py_missing
fi
