/*
 * fuzz_target.h - what a libFuzzer target in this directory gives the one
 * replay driver (replay.c), besides its entry point: its own starting inputs
 * built with the real code, and optionally an oracle and a generator of
 * random inputs of its own shape.
 *
 * Each fuzz_<x>.c defines LLVMFuzzerTestOneInput and one
 *
 *   const struct fuzz_target fuzz_target = {.make_seeds = ..., ...};
 *
 * Built with libFuzzer, only the entry point is used; linked with replay.c,
 * the target runs in every ctest with any compiler (fuzz_<x>_replay).
 */
#ifndef MOAT_FUZZ_TARGET_H
#define MOAT_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A target's own check: on failure, says which and aborts (a finding). */
#define CHECK(cond)                                                                                                                \
    do {                                                                                                                           \
        if (!(cond)) {                                                                                                             \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                               \
            abort();                                                                                                               \
        }                                                                                                                          \
    } while (0)

/* A seed the target's oracle must accept (see accepts below). */
#define FUZZ_SEED_AUTHENTIC 1

/* How a target hands over a seed: add copies the bytes; flags is 0 or FUZZ_SEED_AUTHENTIC. */
typedef void fuzz_add_seed_fn(const void *data, size_t len, int flags);

struct fuzz_target {
    /* Calls add() once per seed: the valid (and a few invalid) inputs the driver's mutations start from. */
    void (*make_seeds)(fuzz_add_seed_fn *add);

    /* Optional: whether the code under test accepts data as authentic (a credential that verifies).  When
     * set, the driver requires it to hold for the seeds marked FUZZ_SEED_AUTHENTIC and for no other input it
     * generates: no mutation, truncation or splice of a credential may pass. */
    int (*accepts)(const uint8_t *data, size_t size);

    /* Optional: writes one pseudo-random input of the target's own shape (e.g. a valid frame header before
     * random bytes, to get past the first check) into buf, at most cap bytes, and returns its length. */
    size_t (*random_input)(uint8_t *buf, size_t cap, uint32_t (*rng)(void));
};

extern const struct fuzz_target fuzz_target;

#endif
