#!/usr/bin/env bash
# Set up everything GPU Goblin needs on a Debian 12 or 13 machine, then build.
#
# Idempotent and quick once done: system packages are installed only when
# dpkg says they are missing, Python packages only when not importable at the
# right version, and meson is only re-run when a build directory is missing or
# unusable (ninja itself re-runs meson when a meson.build changes).
#
#   bash scripts/setup.sh            # packages + build/ + build-asan/
#   GOBLIN_SETUP_ASAN=0 bash scripts/setup.sh   # skip the sanitizer build
#   GOBLIN_SETUP_TSAN=1 bash scripts/setup.sh   # also the ThreadSanitizer build
#   GOBLIN_SETUP_BUILD=0 bash scripts/setup.sh  # packages only
#   GOBLIN_MESON_ARGS="-Dcuda=disabled" bash scripts/setup.sh  # extra meson
#     options, used when a build directory is (re)configured
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$top"

log() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] error: %s\n' "$*" >&2; exit 1; }

jobs=${GOBLIN_JOBS:-$(nproc 2>/dev/null || echo 2)}

# --- system packages --------------------------------------------------------
# Each entry lists alternative package names, best first: a name is chosen
# if apt knows it, so the same list works on Debian 12 (bookworm) and 13
# (trixie), where pkg-config became pkgconf and BLIS may ship only one flavour.
apt_wanted=(
  "build-essential"
  "pkg-config|pkgconf"
  "cmake"
  "libnng-dev"
  "libmbedtls-dev"
  "libblis-openmp-dev|libblis-pthread-dev|libblis64-openmp-dev"
  "libblis-dev|libblis-openmp-dev"
  "libcriterion-dev"
  "libsqlite3-dev"
  "libcurl4-openssl-dev"
  "libpq-dev"
  "postgresql"
  "chromium"
  "chromium-driver"
)

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then sudo_cmd=(sudo); fi
fi

pkg_installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
pkg_known() { apt-cache show "$1" >/dev/null 2>&1; }

missing=()
unresolved=()
for alts in "${apt_wanted[@]}"; do
  IFS='|' read -r -a names <<<"$alts"
  have=0
  for n in "${names[@]}"; do
    if pkg_installed "$n"; then have=1; break; fi
  done
  [ "$have" = 1 ] && continue
  unresolved+=("$alts")
done

if [ "${#unresolved[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null 2>&1 || die "missing packages (${unresolved[*]}) and no apt-get"
  log "updating the package lists"
  "${sudo_cmd[@]}" apt-get update -qq
  for alts in "${unresolved[@]}"; do
    IFS='|' read -r -a names <<<"$alts"
    pick=""
    for n in "${names[@]}"; do
      if pkg_known "$n"; then pick=$n; break; fi
    done
    [ -n "$pick" ] || die "none of these packages is known to apt: ${alts//|/, }"
    missing+=("$pick")
  done
  log "installing: ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
fi

# --- Python packages --------------------------------------------------------
# python3 is whatever is first on PATH (pyenv here); pip through it so the
# packages land where that interpreter looks.
py=${PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || die "$py not found"

# name|import-check: the check is a Python expression that must be true.
pip_wanted=(
  "meson|ver('meson') >= (1, 0, 1)"
  "ninja|ver('ninja') >= (1, 10)"
  "meson-python|ver('meson-python') >= (0, 13)"
  "numpy|ver('numpy') >= (1, 24)"
  "pytest|ver('pytest') >= (7, 0)"
  "pytest-xdist|ver('pytest-xdist') >= (3, 0)"
  "torch==2.13.0|ver('torch') == (2, 13, 0)"
  "tqdm|ver('tqdm') >= (4, 0)"
  "aiosmtpd|ver('aiosmtpd') >= (1, 4)"
  "selenium|ver('selenium') >= (4, 10)"
)
pip_missing=()
for entry in "${pip_wanted[@]}"; do
  spec=${entry%%|*}
  check=${entry#*|}
  if ! "$py" - "$check" <<'PY' 2>/dev/null
import sys, re
from importlib.metadata import version, PackageNotFoundError
def ver(name):
    try:
        v = version(name)
    except PackageNotFoundError:
        return (-1,)
    return tuple(int(x) for x in re.findall(r"\d+", v.split("+")[0])[:3])
sys.exit(0 if eval(sys.argv[1]) else 1)
PY
  then
    pip_missing+=("$spec")
  fi
done
if [ "${#pip_missing[@]}" -gt 0 ]; then
  log "pip installing: ${pip_missing[*]}"
  PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q "${pip_missing[@]}"
  hash -r
fi

# meson and ninja as that interpreter installed them (a pyenv shim or a venv).
bindir=$("$py" -c 'import sysconfig; print(sysconfig.get_path("scripts"))')
export PATH="$bindir:$PATH"
command -v meson >/dev/null 2>&1 || die "meson not on PATH after install"
command -v ninja >/dev/null 2>&1 || die "ninja not on PATH after install"

[ "${GOBLIN_SETUP_BUILD:-1}" = 1 ] || { log "packages ready (build skipped)"; exit 0; }

# --- builds -----------------------------------------------------------------
# configure DIR ARGS...: meson setup unless DIR is already a working build dir.
configure() {
  local dir=$1; shift
  if [ -f "$dir/build.ninja" ] && [ -f "$dir/meson-private/coredata.dat" ]; then
    return 0
  fi
  if [ -e "$dir" ]; then
    log "$dir is not a usable build directory; recreating it"
    rm -rf "$dir"
  fi
  log "configuring $dir"
  local out
  out=$(meson setup "$dir" "$@" 2>&1) || { printf '%s\n' "$out" >&2; rm -rf "$dir"; die "meson setup $dir failed"; }
}

# shellcheck disable=SC2206 # word splitting of the options is intended
extra=(${GOBLIN_MESON_ARGS:-})

# build DIR: ninja, quiet unless it fails (then its whole output goes to stderr).
build() {
  log "building $1/ (-j$jobs)"
  local out
  out=$(ninja -C "$1" -j "$jobs" 2>&1) || { printf '%s\n' "$out" >&2; die "$1/ failed to build"; }
}

configure build "${extra[@]}"
build build

if [ "${GOBLIN_SETUP_ASAN:-1}" = 1 ]; then
  # AddressSanitizer + UBSan build of the library and the unit tests.
  # b_lundef=false: the sanitizer runtimes resolve symbols at load time.
  configure build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false \
    -Dcuda=disabled -Dexamples=false -Dbench=false -Dpython=disabled "${extra[@]}"
  build build-asan
fi

if [ "${GOBLIN_SETUP_TSAN:-0}" = 1 ]; then
  # ThreadSanitizer build (build-tsan/): gcc's target_clones are built away under it
  # (libgoblin/base/target_clones.h), and the unit tests get tests/unit/tsan_criterion.c.
  configure build-tsan -Dbuildtype=debug -Db_sanitize=thread -Db_lundef=false \
    -Dcuda=disabled -Dexamples=false -Dbench=false -Dpython=disabled "${extra[@]}"
  build build-tsan
fi

if [ "${GOBLIN_SETUP_PYPKG:-1}" = 1 ]; then
  # The Python package (import goblin), built by meson-python into build-py/
  # (reused, so a rebuild after a change takes seconds). The CUDA backend is
  # compiled and tested in build/; the package stays CPU-only here.
  log "installing the goblin Python package"
  out=$(PIP_ROOT_USER_ACTION=ignore "$py" -m pip install -q --no-build-isolation \
        -Cbuild-dir=build-py -Csetup-args=-Dcuda=disabled . 2>&1) ||
    { printf '%s\n' "$out" >&2; die "pip install . failed"; }
fi

log "ready"
