/*
 * replay_seeds.c - runs a libFuzzer target of this directory without
 * libFuzzer, so that it builds and runs with any compiler as a ctest
 * (fuzz_apikey_replay, fuzz_piston_replay).  The target supplies its own
 * seeds (fuzz_make_seeds, see fuzz_target.h).
 *
 *   <name> [--write-seeds DIR] [FILE|DIR ...]
 *
 * Runs the target over each seed, every prefix of it, single-byte
 * mutations (bit flips, 0x00, 0xff, a few ASCII characters that matter to
 * the parsers), one-byte deletions and insertions, splices of two seeds,
 * and a fixed pseudo-random stream of seed pieces and random bytes.
 * FILE/DIR arguments (a libFuzzer corpus or crash file) are replayed too.
 * --write-seeds stores the seeds as files, a starting corpus for the fuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_target.h"

#define MAX_SEEDS 64
#define SCRATCH   (1 << 16)

struct seed {
    uint8_t *data;
    size_t len;
};

static struct seed seeds[MAX_SEEDS];
static size_t nseeds;
static unsigned long runs;

static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", fuzz_replay_name, what);
    exit(1);
}

static void run(const uint8_t *data, size_t len)
{
    /* a private, exactly sized copy, so reads past the end are caught by ASan */
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL)
        die("out of memory");
    if (len)
        memcpy(copy, data, len);
    LLVMFuzzerTestOneInput(copy, len);
    free(copy);
    runs++;
}

static void add_seed(const void *data, size_t len)
{
    if (nseeds == MAX_SEEDS)
        die("too many seeds");
    if (len > SCRATCH / 4)
        die("seed too large");
    seeds[nseeds].data = malloc(len ? len : 1);
    if (seeds[nseeds].data == NULL)
        die("out of memory");
    if (len)
        memcpy(seeds[nseeds].data, data, len);
    seeds[nseeds].len = len;
    nseeds++;
}

static void write_seeds(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        die("cannot create the seed directory");
    for (size_t i = 0; i < nseeds; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/seed-%02zu", dir, i);
        FILE *f = fopen(path, "wb");
        if (f == NULL || (seeds[i].len && fwrite(seeds[i].data, 1, seeds[i].len, f) != seeds[i].len) || fclose(f) != 0)
            die("cannot write a seed");
    }
}

static void replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        die("cannot open an input file");
    uint8_t *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len == cap) {
            cap = cap ? cap * 2 : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (nb == NULL)
                die("out of memory");
            buf = nb;
        }
        size_t n = fread(buf + len, 1, cap - len, f);
        if (n == 0)
            break;
        len += n;
    }
    fclose(f);
    run(buf, len);
    free(buf);
}

static void replay_path(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        die("no such input");
    if (!S_ISDIR(st.st_mode)) {
        replay_file(path);
        return;
    }
    DIR *d = opendir(path);
    if (d == NULL)
        die("cannot open an input directory");
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        char sub[4096];
        if (de->d_name[0] == '.')
            continue;
        snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name);
        if (stat(sub, &st) == 0 && S_ISREG(st.st_mode))
            replay_file(sub);
    }
    closedir(d);
}

static uint32_t rng_state = 0x6d6f6174; /* "moat" */

static uint32_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static void mutate_seed(const struct seed *s, uint8_t *scratch)
{
    static const uint8_t xors[] = {0x01, 0x20, 0x80, 0xff};
    static const uint8_t sets[] = {0x00, 0xff, '"', '\\', '_', '/', '.', ' ', '0', 'a', 'A', '{', ']', ','};
    const uint8_t *d = s->data;
    size_t len = s->len;

    /* the seed itself and every prefix of it */
    for (size_t cut = 0; cut <= len; cut++)
        run(d, cut);
    for (size_t i = 0; i < len; i++) {
        memcpy(scratch, d, len);
        for (size_t k = 0; k < sizeof(xors); k++) {
            scratch[i] = d[i] ^ xors[k];
            run(scratch, len);
        }
        for (size_t k = 0; k < sizeof(sets); k++) {
            scratch[i] = sets[k];
            run(scratch, len);
        }
        /* delete byte i; insert a copy of it */
        memcpy(scratch, d, i);
        memcpy(scratch + i, d + i + 1, len - i - 1);
        run(scratch, len - 1);
        memcpy(scratch, d, i + 1);
        memcpy(scratch + i + 1, d + i, len - i);
        run(scratch, len + 1);
    }
    /* spliced with every seed: head of this one, tail of the other */
    for (size_t t = 0; t < nseeds; t++) {
        size_t a = len / 2, b = seeds[t].len / 2;
        memcpy(scratch, d, a);
        memcpy(scratch + a, seeds[t].data + b, seeds[t].len - b);
        run(scratch, a + seeds[t].len - b);
        memcpy(scratch, d, len);
        memcpy(scratch + len, seeds[t].data, seeds[t].len);
        run(scratch, len + seeds[t].len);
    }
}

int main(int argc, char **argv)
{
    const char *seed_dir = NULL;
    int first_input = argc;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--write-seeds") == 0 && i + 1 < argc) {
            seed_dir = argv[++i];
        } else {
            first_input = i;
            break;
        }
    }

    fuzz_make_seeds(add_seed);
    if (nseeds == 0)
        die("the target made no seeds");
    if (seed_dir)
        write_seeds(seed_dir);

    uint8_t *scratch = malloc(SCRATCH);
    if (scratch == NULL)
        die("out of memory");

    for (size_t s = 0; s < nseeds; s++)
        mutate_seed(&seeds[s], scratch);

    /* pseudo-random: a random piece of a seed with random bytes written over it */
    for (int i = 0; i < 20000; i++) {
        const struct seed *s = &seeds[rng() % nseeds];
        size_t len = s->len ? rng() % (s->len + 1) : 0, extra = rng() % 8;
        size_t off = s->len > len ? rng() % (s->len - len + 1) : 0;
        memcpy(scratch, s->data + off, len);
        for (size_t k = 0; k < extra; k++)
            scratch[len + k] = (uint8_t)rng();
        len += extra;
        for (unsigned k = rng() % 4; k > 0 && len > 0; k--)
            scratch[rng() % len] = (uint8_t)rng();
        run(scratch, len);
    }

    for (int i = first_input; i < argc; i++)
        replay_path(argv[i]);

    free(scratch);
    for (size_t s = 0; s < nseeds; s++)
        free(seeds[s].data);
    printf("%s: %lu inputs from %zu seeds, no failures\n", fuzz_replay_name, runs, nseeds);
    return 0;
}
