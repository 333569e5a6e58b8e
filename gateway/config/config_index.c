/*
 * config_index.c - see config_index.h.
 */
#include "config_index.h"

#include <stdlib.h>

#define MIN_SLOTS 16

uint32_t gw_index_hash(const void *data, size_t len)
{
    const unsigned char *p = data;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */

    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    return (uint32_t)(h ^ (h >> 32));
}

/* Puts slot value v into slots (mask) at the first free place of its run. */
static void place(uint64_t *slots, size_t mask, uint64_t v)
{
    size_t i = (size_t)(v >> 32) & mask;

    while (slots[i] != 0)
        i = (i + 1) & mask;
    slots[i] = v;
}

/* Twice the slots (or MIN_SLOTS), every entry moved by its stored hash. */
static int grow(struct gw_index *ix)
{
    size_t n = ix->slots != NULL ? (ix->mask + 1) * 2 : MIN_SLOTS;
    uint64_t *slots = calloc(n, sizeof(*slots));

    if (slots == NULL)
        return -1;
    for (size_t i = 0; ix->slots != NULL && i <= ix->mask; i++)
        if (ix->slots[i] != 0)
            place(slots, n - 1, ix->slots[i]);
    free(ix->slots);
    ix->slots = slots;
    ix->mask = n - 1;
    return 0;
}

int gw_index_add(struct gw_index *ix, uint32_t hash, size_t index)
{
    if (index >= UINT32_MAX)
        return -1;
    if ((ix->slots == NULL || 2 * (ix->used + 1) > ix->mask + 1) && grow(ix) != 0)
        return -1;
    place(ix->slots, ix->mask, (uint64_t)hash << 32 | (uint64_t)(index + 1));
    ix->used++;
    return 0;
}

size_t gw_index_next(const struct gw_index *ix, uint32_t hash, size_t *pos)
{
    if (ix->slots == NULL)
        return 0;
    /* *pos counts the slots probed so far; the run starts at the hash's slot */
    for (size_t i = ((size_t)hash + *pos) & ix->mask; *pos <= ix->mask; i = (i + 1) & ix->mask) {
        uint64_t v = ix->slots[i];
        ++*pos;
        if (v == 0)
            return 0;
        if ((uint32_t)(v >> 32) == hash)
            return (size_t)(uint32_t)v;
    }
    return 0;
}

void gw_index_free(struct gw_index *ix)
{
    free(ix->slots);
    ix->slots = NULL;
    ix->mask = 0;
    ix->used = 0;
}
