/* tests/fuzz/probe_libfuzzer.c - configure-time check that clang can link a
 * libFuzzer target (clang alone is not enough: the runtime is a separate package
 * on some systems). */
#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    (void)data;
    (void)size;
    return 0;
}
