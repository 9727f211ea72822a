#!/usr/bin/env bash
# bench/gpu_check.sh - prove the CUDA backend on a machine with an NVIDIA GPU and
# no package registry, using binaries built on a development machine (x86-64).
#
#   bench/gpu_check.sh pack      here: build test_cuda and gpu_bench with CUDA
#                                (build dir $GPU_BUILD_DIR, default build-gpu/) and
#                                copy them with the shared libraries they need (ldd:
#                                BLIS, libgomp, Criterion and its libraries, nng,
#                                mbedTLS, ...) into .gpu-carry/ (about 30 MB)
#   bench/gpu_check.sh selftest  here: the packed binaries start from .gpu-carry/
#                                alone and report "no device" cleanly
#   bench/gpu_check.sh run       on the GPU machine: the conformance suite on the
#                                GPU, then the benchmark; a short table comes last
#
# glibc's own libraries are not carried (the target's newer glibc runs binaries
# built against Debian 12's 2.36); libstdc++/libgcc_s are carried but only used
# when the target has none. libcublas is not carried (about 600 MB): `run` finds
# the target's libcublas.so.13 (CUDA toolkit, or the nvidia-cublas wheel that
# PyTorch installs) and puts its folder on LD_LIBRARY_PATH; without it matmul
# and conv2d run on goblin's own GEMM kernel and the table says so.
#
# `run` stays under 8 minutes: its three steps have timeouts of 150 + 90 + 200 s.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
CARRY="$ROOT/.gpu-carry"
BUILD="${GPU_BUILD_DIR:-$ROOT/build-gpu}"
NVCC="${NVCC:-/usr/local/cuda/bin/nvcc}"
# Hopper (the H200 lent here) plus PTX that newer GPUs can JIT; override for others.
GPU_ARCH="${GPU_ARCH:--gencode=arch=compute_90,code=[sm_90,compute_90]}"

# Libraries the target always has (glibc) or that must come from its driver.
SKIP_LIBS='^(linux-vdso|libc\.so|libm\.so|libpthread\.so|libdl\.so|librt\.so|ld-linux|libresolv\.so|libcuda\.so|libnvidia)'
FALLBACK_LIBS='^(libstdc\+\+\.so|libgcc_s\.so)'

pack() {
    mkdir -p "$CARRY/bin" "$CARRY/lib" "$CARRY/lib-fallback"
    if [ ! -f "$BUILD/build.ninja" ]; then
        meson setup "$BUILD" "$ROOT" -Dcuda=enabled -Dbuildtype=release -Dexamples=false \
            -Dgpu_arch="$GPU_ARCH" >/dev/null
    fi
    ninja -C "$BUILD" -j"${JOBS:-2}" tests/test_cuda libgoblin/libgoblin.a
    # gpu_bench links the static library (it reads the backend's kernel timer, an
    # internal symbol) and the dependencies meson recorded for it.
    local libs
    libs="$(PKG_CONFIG_PATH="$BUILD/meson-uninstalled" pkg-config --static --libs goblin-uninstalled)"
    libs="${libs/-lgoblin/-l:libgoblin.a}"
    "$NVCC" -std=c++17 -O2 --compress-mode=size $GPU_ARCH -I"$ROOT/include" -I"$ROOT/libgoblin" \
        -c "$ROOT/bench/gpu_bench.cu" -o "$BUILD/gpu_bench.o"
    # shellcheck disable=SC2086 # word splitting of the library list is intended
    g++ -o "$CARRY/bin/gpu_bench" "$BUILD/gpu_bench.o" $libs
    cp "$BUILD/tests/test_cuda" "$CARRY/bin/"
    strip --strip-debug "$CARRY/bin/test_cuda" "$CARRY/bin/gpu_bench"
    rm -f "$CARRY/lib/"* "$CARRY/lib-fallback/"*
    local bin lib name
    for bin in "$CARRY/bin/"*; do
        ldd "$bin" | awk '/=>/ { print $3 }' | while read -r lib; do
            [ -f "$lib" ] || continue
            name="$(basename "$lib")"
            if [[ "$name" =~ $SKIP_LIBS ]]; then continue; fi
            if [[ "$name" =~ $FALLBACK_LIBS ]]; then
                cp -L "$lib" "$CARRY/lib-fallback/$name"
            else
                cp -L "$lib" "$CARRY/lib/$name"
            fi
        done
    done
    cp "$ROOT/bench/gpu_check.sh" "$CARRY/"
    echo "packed into $CARRY: $(du -sh "$CARRY" | cut -f1)"
    ls "$CARRY/lib" | tr '\n' ' '
    echo
}

# LD_LIBRARY_PATH for the carried binaries (+ the target's cuBLAS if any).
setup_env() {
    local path="$CARRY/lib"
    local l
    for l in "$CARRY/lib-fallback/"*; do
        [ -e "$l" ] || continue
        if ! ldconfig -p 2>/dev/null | grep -q "$(basename "$l")"; then
            path="$path:$CARRY/lib-fallback"
            break
        fi
    done
    local cublas=""
    if [ -n "${CUBLAS_DIR:-}" ]; then
        cublas="$CUBLAS_DIR/libcublas.so.13"
    else
        cublas="$(ldconfig -p 2>/dev/null | awk '/libcublas\.so\.13 /{print $NF; exit}')"
        if [ -z "$cublas" ]; then
            cublas="$(find /usr/local /opt /usr/lib -name 'libcublas.so.13' 2>/dev/null | head -n 1)"
        fi
    fi
    if [ -n "$cublas" ] && [ -e "$cublas" ]; then
        path="$path:$(dirname "$cublas")"
        echo "cuBLAS: $cublas"
    else
        echo "cuBLAS: not found (set CUBLAS_DIR); matmul/conv2d use goblin's own GEMM kernel"
    fi
    export LD_LIBRARY_PATH="$path${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}

selftest() {
    [ -x "$CARRY/bin/test_cuda" ] || { echo "nothing packed: run '$0 pack' first"; exit 1; }
    setup_env
    echo "== test_cuda from .gpu-carry (expect: the GPU suite skipped, no device)"
    "$CARRY/bin/test_cuda" --jobs=1
    echo "== gpu_bench from .gpu-carry (expect: exit 3, no device)"
    set +e
    "$CARRY/bin/gpu_bench" --small
    local rc=$?
    set -e
    [ "$rc" = 3 ] || { echo "gpu_bench: unexpected exit code $rc"; exit 1; }
    echo "selftest passed: the carried binaries start and report no device cleanly"
}

run() {
    [ -x "$CARRY/bin/test_cuda" ] || { echo "nothing packed in $CARRY"; exit 1; }
    local t0=$SECONDS
    command -v nvidia-smi >/dev/null && nvidia-smi -L || true
    setup_env
    echo "== conformance: every catalogue op on the GPU vs the reference backend"
    local suite=0 suite2=0
    GOBLIN_CUDA_POISON=1 timeout 150 "$CARRY/bin/test_cuda" --jobs=1 --verbose=1 || suite=$?
    echo "== conformance again with cuBLAS disabled (goblin's own GEMM for matmul/conv2d)"
    GOBLIN_CUDA_NO_CUBLAS=1 GOBLIN_CUDA_POISON=1 timeout 90 "$CARRY/bin/test_cuda" --jobs=1 \
        --filter 'cuda_conformance/every_op*' || suite2=$?
    echo "== benchmark"
    local bench=0
    timeout "${BENCH_TIMEOUT:-200}" "$CARRY/bin/gpu_bench" ${BENCH_ARGS:-} || bench=$?
    echo
    echo "conformance: $suite (without cuBLAS: $suite2); benchmark: $bench (exit codes);" \
        "$((SECONDS - t0)) s"
    [ "$suite" = 0 ] && [ "$suite2" = 0 ] && [ "$bench" = 0 ]
}

case "${1:-}" in
pack) pack ;;
selftest) selftest ;;
run) run ;;
*)
    echo "usage: $0 pack | selftest | run" >&2
    exit 2
    ;;
esac
