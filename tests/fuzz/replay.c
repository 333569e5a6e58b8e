/*
 * replay.c - the one replay driver: runs any libFuzzer target of this
 * directory without libFuzzer, so that every target builds and runs with any
 * compiler as a ctest (fuzz_proto_replay, fuzz_apikey_replay,
 * fuzz_piston_replay, fuzz_jwt_replay).  The target supplies its seeds and,
 * optionally, an oracle and random inputs of its own shape (fuzz_target.h).
 *
 *   fuzz_<x>_replay [--write-seeds DIR] [FILE|DIR ...]
 *
 * Generated inputs, in a fixed order (the same on every run):
 *   - each seed, every prefix of it, every single-bit flip and a few byte
 *     values that matter to the parsers at every position, one-byte
 *     deletions and insertions, a trailing NUL and a trailing half
 *     tag-length header;
 *   - splices of every pair of seeds (head of one, tail of the other) and
 *     every pair back to back;
 *   - a pseudo-random stream of seed pieces with random bytes over them, and
 *     of the target's own random inputs if it makes any.
 * If the target has an oracle (accepts), a generated input must be accepted
 * exactly when it is one of the seeds marked authentic.
 *
 * FILE/DIR arguments (a libFuzzer corpus or crash file) are replayed after
 * that, with no expectation but surviving the target's own checks.
 * --write-seeds stores the seeds as files, a starting corpus for the fuzzer.
 * Exit status 0 when all is well; a target's failed check abort()s.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_target.h"

#define MAX_SEEDS      64
#define SCRATCH        (1 << 16)
#define MAX_SEED_LEN   (SCRATCH / 4) /* a splice of two seeds plus a few bytes fits the scratch buffer */
#define RANDOM_INPUTS  20000
#define REPORT_AT_MOST 10

struct seed {
    uint8_t *data;
    size_t len;
    int flags;
};

static const char *prog = "fuzz_replay";
static struct seed seeds[MAX_SEEDS];
static size_t nseeds;
static unsigned long runs, oracle_failures;

static void die(const char *what)
{
    fprintf(stderr, "%s: %s\n", prog, what);
    exit(1);
}

/* ===========================================================================
 * Running the target
 * ======================================================================== */

static int is_authentic(const uint8_t *data, size_t len)
{
    for (size_t i = 0; i < nseeds; i++)
        if ((seeds[i].flags & FUZZ_SEED_AUTHENTIC) && seeds[i].len == len && (len == 0 || memcmp(seeds[i].data, data, len) == 0))
            return 1;
    return 0;
}

/* The input as a C string literal, cut after 96 bytes, for a failure report. */
static void print_input(const uint8_t *data, size_t len)
{
    fputc('"', stderr);
    for (size_t i = 0; i < len && i < 96; i++) {
        if (data[i] >= 0x20 && data[i] < 0x7f && data[i] != '"' && data[i] != '\\')
            fputc(data[i], stderr);
        else
            fprintf(stderr, "\\x%02x", data[i]);
    }
    fprintf(stderr, "\"%s\n", len > 96 ? "..." : "");
}

static void check_oracle(const uint8_t *data, size_t len)
{
    int want = is_authentic(data, len);

    if (fuzz_target.accepts(data, len) == want)
        return;
    if (++oracle_failures <= REPORT_AT_MOST) {
        fprintf(stderr, "%s: generated input of %zu bytes %s: ", prog, len, want ? "rejected" : "accepted");
        print_input(data, len);
    }
}

/* Runs the target on a private, exactly sized copy, so reads past the end are caught by ASan. */
static void run_input(const uint8_t *data, size_t len, int generated)
{
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL)
        die("out of memory");
    if (len)
        memcpy(copy, data, len);
    LLVMFuzzerTestOneInput(copy, len);
    if (generated && fuzz_target.accepts != NULL)
        check_oracle(copy, len);
    free(copy);
    runs++;
}

static void run(const uint8_t *data, size_t len)
{
    run_input(data, len, 1);
}

/* ===========================================================================
 * Seeds
 * ======================================================================== */

static void add_seed(const void *data, size_t len, int flags)
{
    if (nseeds == MAX_SEEDS)
        die("too many seeds");
    if (len > MAX_SEED_LEN)
        die("seed too large");
    seeds[nseeds].data = malloc(len ? len : 1);
    if (seeds[nseeds].data == NULL)
        die("out of memory");
    if (len)
        memcpy(seeds[nseeds].data, data, len);
    seeds[nseeds].len = len;
    seeds[nseeds].flags = flags;
    nseeds++;
}

static void write_seeds(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        die("cannot create the seed directory");
    for (size_t i = 0; i < nseeds; i++) {
        char path[4096];
        if ((size_t)snprintf(path, sizeof(path), "%s/seed-%03zu", dir, i) >= sizeof(path))
            die("seed directory name too long");
        FILE *f = fopen(path, "wb");
        if (f == NULL || (seeds[i].len && fwrite(seeds[i].data, 1, seeds[i].len, f) != seeds[i].len) || fclose(f) != 0)
            die("cannot write a seed");
    }
}

/* ===========================================================================
 * Generated inputs
 * ======================================================================== */

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
    static const uint8_t xors[] = {0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40, 0x80, 0xff};
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
    /* a trailing NUL; a trailing half tag-length header (tag 1, length cut short) */
    memcpy(scratch, d, len);
    scratch[len] = 0;
    run(scratch, len + 1);
    memcpy(scratch + len, "\x00\x01\x00\x00", 4);
    run(scratch, len + 4);
    /* spliced with every seed: head of this one, tail of the other; both whole, back to back */
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

/* A random piece of a seed with random bytes appended and written over it. */
static void random_piece(uint8_t *scratch)
{
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

/* ===========================================================================
 * Corpus files
 * ======================================================================== */

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
    if (ferror(f))
        die("cannot read an input file");
    fclose(f);
    run_input(buf, len, 0);
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
        if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", path, de->d_name) >= sizeof(sub))
            die("input path too long");
        if (stat(sub, &st) == 0 && S_ISREG(st.st_mode))
            replay_file(sub);
    }
    closedir(d);
}

int main(int argc, char **argv)
{
    const char *seed_dir = NULL;
    int first_input = argc;

    if (argc > 0 && argv[0] != NULL) {
        const char *slash = strrchr(argv[0], '/');
        prog = slash ? slash + 1 : argv[0];
    }
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--write-seeds") == 0 && i + 1 < argc) {
            seed_dir = argv[++i];
        } else {
            first_input = i;
            break;
        }
    }

    fuzz_target.make_seeds(add_seed);
    if (nseeds == 0)
        die("the target made no seeds");
    if (seed_dir)
        write_seeds(seed_dir);

    uint8_t *scratch = malloc(SCRATCH);
    if (scratch == NULL)
        die("out of memory");

    for (size_t s = 0; s < nseeds; s++)
        mutate_seed(&seeds[s], scratch);
    for (int i = 0; i < RANDOM_INPUTS; i++)
        random_piece(scratch);
    if (fuzz_target.random_input != NULL) {
        for (int i = 0; i < RANDOM_INPUTS; i++) {
            size_t len = fuzz_target.random_input(scratch, SCRATCH, rng);
            if (len > SCRATCH)
                die("the target's random input overran the buffer");
            run(scratch, len);
        }
    }

    for (int i = first_input; i < argc; i++)
        replay_path(argv[i]);

    free(scratch);
    for (size_t s = 0; s < nseeds; s++)
        free(seeds[s].data);
    if (oracle_failures > 0) {
        fprintf(stderr, "%s: the oracle disagreed on %lu of %lu inputs\n", prog, oracle_failures, runs);
        return 1;
    }
    printf("%s: %lu inputs from %zu seeds, no failures\n", prog, runs, nseeds);
    return 0;
}
