/*
 * fuzz_target.h - what a libFuzzer target in this directory provides to
 * the generic replay driver (replay_seeds.c): the entry point, and its own
 * starting inputs built with the real code (valid inputs the mutations start
 * from).
 */
#ifndef MOAT_FUZZ_TARGET_H
#define MOAT_FUZZ_TARGET_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Calls add() once per seed; add copies the bytes. */
void fuzz_make_seeds(void (*add)(const void *data, size_t len));

/* The replay driver's name in messages, e.g. "fuzz_apikey_replay". */
extern const char fuzz_replay_name[];

#endif
