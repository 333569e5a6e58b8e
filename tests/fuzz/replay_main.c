/*
 * replay_main.c - runs the fuzz_proto_decode target without libFuzzer, so
 * that it builds and runs with any compiler as the ctest unit_fuzz_proto_replay.
 *
 *   fuzz_proto_replay [--write-seeds DIR] [FILE|DIR ...]
 *
 * It makes its own seeds with the real encoders (a frame of every message
 * type, full and minimal), and runs the target over each seed, every prefix
 * of it, single-byte mutations of it, pairs of seeds back to back and a
 * fixed pseudo-random stream of mostly-valid headers with random payloads.
 * FILE/DIR arguments (a libFuzzer corpus or crash file) are replayed too.
 * --write-seeds stores the seeds as files, a starting corpus for the fuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz_proto.h"
#include "moat_proto.h"

#define MAX_SEEDS 16

struct seed {
    uint8_t *data;
    size_t len;
};

static struct seed seeds[MAX_SEEDS];
static size_t nseeds;
static unsigned long runs;

static void die(const char *what)
{
    fprintf(stderr, "fuzz_proto_replay: %s\n", what);
    exit(1);
}

static void run(const uint8_t *data, size_t len)
{
    /* a private copy, so reads past the end are caught by ASan */
    uint8_t *copy = malloc(len ? len : 1);
    if (copy == NULL)
        die("out of memory");
    if (len)
        memcpy(copy, data, len);
    LLVMFuzzerTestOneInput(copy, len);
    free(copy);
    runs++;
}

/* Takes the buffer's frame as a seed, or dies if encoding failed. */
static void add_seed(struct moat_buf *b, int rc, const char *why)
{
    if (rc != 0) {
        fprintf(stderr, "seed %zu: %s\n", nseeds, why ? why : "?");
        die("a seed did not encode");
    }
    if (nseeds == MAX_SEEDS)
        die("too many seeds");
    seeds[nseeds].data = b->data;
    seeds[nseeds].len = b->len;
    nseeds++;
    memset(b, 0, sizeof(*b));
}

static void make_seeds(void)
{
    struct moat_buf b = {0};
    const char *why = NULL;
    int rc;

    /* exec request: every field */
    char n0[] = "main.py", n1[] = "blob.bin", lang[] = "python", ver[] = "3.11.x";
    uint8_t c0[] = "print(input())\n", c1[] = {0, 1, 2, 0xff, 0xc0, 0x80, 0};
    struct moat_file files[] = {{n0, c0, sizeof(c0) - 1}, {n1, c1, sizeof(c1)}};
    char a0[] = "x\ny", a1[] = "", a2[] = "\xc3\xa9";
    char *args[] = {a0, a1, a2};
    uint8_t in[] = {'4', '2', '\n', 0};
    struct moat_exec_request req = {.language = lang,
                                    .version = ver,
                                    .files = files,
                                    .nfiles = 2,
                                    .args = args,
                                    .nargs = 3,
                                    .stdin_data = in,
                                    .stdin_len = sizeof(in),
                                    .run_timeout_ms = 3000,
                                    .compile_timeout_ms = 10000,
                                    .run_memory_bytes = 268435456,
                                    .compile_memory_bytes = 0};
    rc = moat_encode_exec_request(&b, 1, &req, &why);
    add_seed(&b, rc, why);

    /* exec request: defaults, one empty file */
    struct moat_file empty = {n0, NULL, 0};
    struct moat_exec_request min = {.language = lang,
                                    .version = ver,
                                    .files = &empty,
                                    .nfiles = 1,
                                    .run_timeout_ms = -1,
                                    .compile_timeout_ms = -1,
                                    .run_memory_bytes = -1,
                                    .compile_memory_bytes = -1};
    rc = moat_encode_exec_request(&b, 2, &min, &why);
    add_seed(&b, rc, why);

    /* exec result: both stages */
    char rl[] = "c", rv[] = "10.2.1", msg[] = "memory limit";
    uint8_t out[] = {'o', 'k', 0xff, 0}, err[] = "warn\n";
    struct moat_exec_result res = {
        .language = rl,
        .version = rv,
        .compile = {.present = 1,
                    .stderr_data = err,
                    .stderr_len = 5,
                    .output_data = err,
                    .output_len = 5,
                    .has_code = 1,
                    .code = 0,
                    .status = MOAT_STATUS_OK,
                    .cpu_ms = 10,
                    .wall_ms = 20,
                    .memory_bytes = 1 << 20},
        .run = {.present = 1,
                .stdout_data = out,
                .stdout_len = sizeof(out),
                .output_data = out,
                .output_len = sizeof(out),
                .has_signal = 1,
                .signal = 9,
                .status = MOAT_STATUS_ML,
                .message = msg,
                .cpu_ms = 3000,
                .wall_ms = 3100,
                .memory_bytes = 268435456},
    };
    rc = moat_encode_exec_result(&b, 3, &res, &why);
    add_seed(&b, rc, why);

    /* exec result: run only, negative exit code */
    struct moat_exec_result run_only = {
        .language = rl, .version = rv, .run = {.present = 1, .has_code = 1, .code = -1, .status = MOAT_STATUS_RE}};
    rc = moat_encode_exec_result(&b, 4, &run_only, &why);
    add_seed(&b, rc, why);

    /* error */
    rc = moat_encode_error(&b, 5, MOAT_ERR_UNKNOWN_LANGUAGE, "no such language: cobol", &why);
    add_seed(&b, rc, why);

    /* runtimes */
    char a_py[] = "py", a_py3[] = "py3", bash[] = "bash", bv[] = "5.2.15", a_sh[] = "sh";
    char *pyal[] = {a_py, a_py3}, *shal[] = {a_sh};
    struct moat_runtime items[] = {{lang, ver, pyal, 2, 0}, {bash, bv, shal, 1, 1}};
    struct moat_runtimes rt = {items, 2};
    rc = moat_encode_runtimes(&b, 6, &rt, &why);
    add_seed(&b, rc, why);

    /* runtimes query: a bare header */
    rc = moat_encode_runtimes_query(&b, 7, &why);
    add_seed(&b, rc, why);
}

static void write_seeds(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        die("cannot create the seed directory");
    for (size_t i = 0; i < nseeds; i++) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/seed-%02zu.bin", dir, i);
        FILE *f = fopen(path, "wb");
        if (f == NULL || fwrite(seeds[i].data, 1, seeds[i].len, f) != seeds[i].len || fclose(f) != 0)
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

    make_seeds();
    if (seed_dir)
        write_seeds(seed_dir);

    uint8_t *scratch = malloc(1 << 16);
    if (scratch == NULL)
        die("out of memory");

    for (size_t s = 0; s < nseeds; s++) {
        const uint8_t *d = seeds[s].data;
        size_t len = seeds[s].len;

        /* the seed itself and every prefix of it */
        for (size_t cut = 0; cut <= len; cut++)
            run(d, cut);
        /* single-byte mutations */
        static const uint8_t xors[] = {0x01, 0x80, 0xff};
        for (size_t i = 0; i < len; i++) {
            memcpy(scratch, d, len);
            for (size_t k = 0; k < sizeof(xors); k++) {
                scratch[i] = d[i] ^ xors[k];
                run(scratch, len);
            }
            scratch[i] = 0x00;
            run(scratch, len);
            scratch[i] = 0xff;
            run(scratch, len);
        }
        /* a trailing byte and a trailing partial TLV header */
        memcpy(scratch, d, len);
        scratch[len] = 0;
        run(scratch, len + 1);
        memcpy(scratch + len, "\x00\x01\x00\x00", 4);
        run(scratch, len + 4);
        /* two frames back to back */
        for (size_t t = 0; t < nseeds; t++) {
            memcpy(scratch, d, len);
            memcpy(scratch + len, seeds[t].data, seeds[t].len);
            run(scratch, len + seeds[t].len);
        }
    }

    /* random payloads, mostly behind a valid header of a random type */
    for (int i = 0; i < 20000; i++) {
        size_t len = rng() % 512;
        for (size_t k = 0; k < len; k++)
            scratch[k] = (uint8_t)rng();
        if (len >= MOAT_FRAME_HEADER_SIZE && rng() % 4 != 0) {
            size_t plen = len - MOAT_FRAME_HEADER_SIZE;
            scratch[0] = MOAT_PROTO_VERSION;
            scratch[1] = (uint8_t)(1 + rng() % 5);
            scratch[2] = scratch[3] = 0;
            scratch[4] = scratch[5] = 0;
            scratch[6] = (uint8_t)(plen >> 8);
            scratch[7] = (uint8_t)plen;
            /* small tags, so the decoders get past the first field */
            for (size_t k = MOAT_FRAME_HEADER_SIZE; k + 1 < len; k += 1 + rng() % 16)
                scratch[k] = 0, scratch[k + 1] = (uint8_t)(rng() % 20);
        }
        run(scratch, len);
    }

    for (int i = first_input; i < argc; i++)
        replay_path(argv[i]);

    free(scratch);
    for (size_t s = 0; s < nseeds; s++)
        free(seeds[s].data);
    printf("fuzz_proto_replay: %lu inputs from %zu seeds, no failures\n", runs, nseeds);
    return 0;
}
