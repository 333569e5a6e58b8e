/*
 * keyuse.c - when each API key last authenticated a request.
 *
 * One open-addressed table of GW_KEYUSE_SLOTS slots in a shared anonymous
 * mapping made before the supervisor forks, so the gateway's workers write
 * it and the supervisor reads it with no message in between.  A slot is a
 * key id packed into 48 bits (12 hex digits; 0 marks an empty slot, so the
 * id 000000000000 is never tracked) and the last second it was used.
 * Claiming a slot is one compare-and-swap; a note writes the second only
 * when it changed, so a key costs at most one store per second however
 * busy it is.  Key ids, not configuration entries, are the index: the
 * record survives reloads and moves between the configuration and the
 * store.  The table itself is lost on restart; the supervisor writes what
 * changed into the admin store, to the minute, every
 * control.last_used_every_s (gw_keyuse_since; admin/key_last_used.c), so
 * moatctl key list survives restarts.
 *
 * The supervisor (root) reads memory the gateway (unprivileged) can write:
 * it only ever looks up ids it already knows, and a slot's contents are
 * two integers, so a gateway taken over can at worst lie about times.
 */
#include "keyuse.h"

#include <stddef.h>
#include <sys/mman.h>

#include "apikey.h"
#include "common/gw_limits.h"
#include "moat_hex.h"

struct keyuse_slot {
    uint64_t id;   /* __atomic; 0: empty */
    uint64_t last; /* __atomic; seconds since the epoch */
};

static struct keyuse_slot *table;

int gw_keyuse_init(void)
{
    void *p = mmap(NULL, sizeof(struct keyuse_slot) * GW_KEYUSE_SLOTS, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

    if (p == MAP_FAILED)
        return -1;
    table = p;
    return 0;
}

/* The id as a number; 0 for anything that is not a key id. */
static uint64_t pack(const char *id)
{
    uint8_t b[APIKEY_ID_LEN / 2];
    uint64_t v = 0;

    if (!apikey_valid_id(id, APIKEY_ID_LEN) || moat_hex_decode(id, APIKEY_ID_LEN, b, MOAT_HEX_LOWER) != 0)
        return 0;
    for (size_t i = 0; i < sizeof(b); i++)
        v = v << 8 | b[i];
    return v;
}

/* The slot of v, claimed when claim is set; NULL when absent or full. */
static struct keyuse_slot *find(uint64_t v, int claim)
{
    uint64_t h = v * 0x9e3779b97f4a7c15ull;

    for (size_t n = 0; n < GW_KEYUSE_SLOTS; n++) {
        struct keyuse_slot *s = &table[(h + n) % GW_KEYUSE_SLOTS];
        uint64_t cur = __atomic_load_n(&s->id, __ATOMIC_ACQUIRE);
        if (cur == v)
            return s;
        if (cur != 0)
            continue;
        if (!claim)
            return NULL;
        if (__atomic_compare_exchange_n(&s->id, &cur, v, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) || cur == v)
            return s;
    }
    return NULL;
}

void gw_keyuse_note(const char *id, time_t now)
{
    uint64_t v = pack(id);
    struct keyuse_slot *s;

    if (table == NULL || v == 0 || (s = find(v, 1)) == NULL)
        return;
    if (__atomic_load_n(&s->last, __ATOMIC_RELAXED) != (uint64_t)now)
        __atomic_store_n(&s->last, (uint64_t)now, __ATOMIC_RELAXED);
}

time_t gw_keyuse_last(const char *id)
{
    uint64_t v = pack(id);
    struct keyuse_slot *s;

    if (table == NULL || v == 0 || (s = find(v, 0)) == NULL)
        return 0;
    return (time_t)__atomic_load_n(&s->last, __ATOMIC_RELAXED);
}

/* The id of a packed value (APIKEY_ID_LEN hex digits). */
static void unpack(uint64_t v, char id[APIKEY_ID_LEN + 1])
{
    uint8_t b[APIKEY_ID_LEN / 2];

    for (size_t i = sizeof(b); i > 0; i--, v >>= 8)
        b[i - 1] = (uint8_t)v;
    moat_hex_encode(b, sizeof(b), id);
    id[APIKEY_ID_LEN] = '\0';
}

size_t gw_keyuse_since(time_t since, gw_keyuse_fn fn, void *arg)
{
    char id[APIKEY_ID_LEN + 1];
    size_t n = 0;

    for (size_t i = 0; table != NULL && i < GW_KEYUSE_SLOTS; i++) {
        uint64_t v = __atomic_load_n(&table[i].id, __ATOMIC_ACQUIRE);
        time_t last = (time_t)__atomic_load_n(&table[i].last, __ATOMIC_RELAXED);
        if (v == 0 || last == 0 || last < since)
            continue;
        unpack(v, id);
        fn(id, last, arg);
        n++;
    }
    return n;
}
