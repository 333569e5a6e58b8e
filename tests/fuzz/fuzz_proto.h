/*
 * fuzz_proto.h - the libFuzzer entry point of fuzz_proto_decode.c, shared
 * with the corpus replay driver (replay_main.c).
 */
#ifndef MOAT_FUZZ_PROTO_H
#define MOAT_FUZZ_PROTO_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#endif
