/* goblin/api.h - export macro and the small definitions every header needs. */
#ifndef GOBLIN_API_H
#define GOBLIN_API_H

#include <stddef.h>
#include <stdint.h>
#include <stdbool.h>

#if defined(_WIN32) && defined(GOBLIN_BUILDING)
#define GOBLIN_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define GOBLIN_API __attribute__((visibility("default")))
#else
#define GOBLIN_API
#endif

#ifdef __cplusplus
#define GOBLIN_BEGIN_DECLS extern "C" {
#define GOBLIN_END_DECLS }
#else
#define GOBLIN_BEGIN_DECLS
#define GOBLIN_END_DECLS
#endif

#endif
