/* libgoblin/base/target_clones.h - GOBLIN_TARGET_CLONES(...): one copy of a function per
 * ISA level, picked when the library is loaded (gcc's target_clones, an ifunc).
 *
 * Under ThreadSanitizer it expands to nothing: the ifunc resolvers run during
 * relocation, before the TSan runtime is initialised, and crash the process before
 * main (gcc 12: SEGV in im2col_same_f32[resolver]). The baseline copy is what runs
 * then; each clone gives the same bits (the files that use it say why), so results do
 * not change. Define GOBLIN_NO_TARGET_CLONES to get the same for another reason. */
#ifndef GOBLIN_BASE_TARGET_CLONES_H
#define GOBLIN_BASE_TARGET_CLONES_H

#if defined(__SANITIZE_THREAD__) && !defined(GOBLIN_NO_TARGET_CLONES)
#define GOBLIN_NO_TARGET_CLONES 1
#endif
#if defined(__has_feature) && !defined(GOBLIN_NO_TARGET_CLONES)
#if __has_feature(thread_sanitizer)
#define GOBLIN_NO_TARGET_CLONES 1
#endif
#endif

#ifdef GOBLIN_NO_TARGET_CLONES
#define GOBLIN_TARGET_CLONES(...)
#else
#define GOBLIN_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#endif

#endif
