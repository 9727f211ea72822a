#!/bin/sh
# Print the library version from include/goblin/version.h (meson reads it).
cd "$(dirname "$0")/.." || exit 1
maj=$(sed -n 's/^#define GOBLIN_VERSION_MAJOR \([0-9]*\)/\1/p' include/goblin/version.h)
min=$(sed -n 's/^#define GOBLIN_VERSION_MINOR \([0-9]*\)/\1/p' include/goblin/version.h)
pat=$(sed -n 's/^#define GOBLIN_VERSION_PATCH \([0-9]*\)/\1/p' include/goblin/version.h)
echo "$maj.$min.$pat"
