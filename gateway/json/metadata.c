/*
 * metadata.c - the `metadata` member of execute and submissions.
 *
 * Theory of operation
 * -------------------
 * A run that an agent made is reviewed by someone who did not see it
 * being made.  The run's packet (audit/FORMAT.md) holds the code, the
 * limits and the outputs; metadata holds the rest of the story, as the
 * client tells it:
 *
 *   {"prompt": "...",                the instruction that produced the code
 *    "purpose": "...",               why it runs
 *    "dependencies": ["numpy>=1.26"],  what the code assumes is installed
 *    "labels": {"team": "search"}}   free key/value tags
 *
 * Every member is optional; nothing else is accepted (a misspelt member is
 * refused, not dropped: the reviewer would miss it).  Texts are UTF-8
 * without NUL characters (jansson has checked UTF-8 already), each within
 * its cap, and the whole object, as compact JSON, within
 * GW_METADATA_MAX_BYTES.  The gateway never interprets metadata and never
 * sends it to the backend: it is stored verbatim in the packet (the object
 * as parsed, members in the order sent) and returned with the packet.
 */
#include "metadata.h"
#include "common/gw_limits.h"

#include <string.h>

#include "moat_errf.h"

/* A text of at most max bytes, without NUL characters. */
static int text_ok(const json_t *v, size_t max)
{
    return json_is_string(v) && json_string_length(v) <= max && strlen(json_string_value(v)) == json_string_length(v);
}

/* A label's name: 1 to GW_METADATA_LABEL_NAME_MAX of [A-Za-z0-9_.:/-]. */
static int label_name_ok(const char *k)
{
    size_t n = strlen(k);

    if (n == 0 || n > GW_METADATA_LABEL_NAME_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!((k[i] >= 'a' && k[i] <= 'z') || (k[i] >= 'A' && k[i] <= 'Z') || (k[i] >= '0' && k[i] <= '9') ||
              strchr("_.:/-", k[i]) != NULL))
            return 0;
    return 1;
}

static int check_dependencies(json_t *v, char *err, size_t errlen)
{
    size_t i;
    json_t *d;

    if (!json_is_array(v) || json_array_size(v) > GW_METADATA_DEPENDENCIES_MAX)
        return moat_errf(err, errlen, "metadata.dependencies must be an array of at most %d strings", GW_METADATA_DEPENDENCIES_MAX);
    json_array_foreach(v, i, d)
    {
        if (!text_ok(d, GW_METADATA_SHORT_MAX))
            return moat_errf(err, errlen, "metadata.dependencies[%zu] must be a string of at most %d bytes without NUL", i,
                             GW_METADATA_SHORT_MAX);
    }
    return 0;
}

static int check_labels(json_t *v, char *err, size_t errlen)
{
    const char *k;
    json_t *l;

    if (!json_is_object(v) || json_object_size(v) > GW_METADATA_LABELS_MAX)
        return moat_errf(err, errlen, "metadata.labels must be an object of at most %d labels", GW_METADATA_LABELS_MAX);
    json_object_foreach(v, k, l)
    {
        if (!label_name_ok(k))
            return moat_errf(err, errlen, "metadata.labels: a label's name must be 1 to %d of A-Z a-z 0-9 _ . : / -",
                             GW_METADATA_LABEL_NAME_MAX);
        if (!text_ok(l, GW_METADATA_SHORT_MAX))
            return moat_errf(err, errlen, "metadata.labels.%s must be a string of at most %d bytes without NUL", k,
                             GW_METADATA_SHORT_MAX);
    }
    return 0;
}

/* The whole object's size, as the packet will hold it. */
static int check_size(const json_t *v, char *err, size_t errlen)
{
    size_t n = json_dumpb(v, NULL, 0, JSON_COMPACT);

    if (n == 0 || n > GW_METADATA_MAX_BYTES)
        return moat_errf(err, errlen, "metadata must be at most %d bytes as compact JSON", GW_METADATA_MAX_BYTES);
    return 0;
}

int gw_metadata_check(json_t *v, char *err, size_t errlen)
{
    const char *k;
    json_t *m;

    if (!json_is_object(v))
        return moat_errf(err, errlen, "metadata must be an object (prompt, purpose, dependencies, labels)");
    json_object_foreach(v, k, m)
    {
        int rc = 0;
        if (strcmp(k, "prompt") == 0) {
            if (!text_ok(m, GW_METADATA_MAX_BYTES))
                rc = moat_errf(err, errlen, "metadata.prompt must be a string of at most %d bytes without NUL",
                               GW_METADATA_MAX_BYTES);
        } else if (strcmp(k, "purpose") == 0) {
            if (!text_ok(m, GW_METADATA_SHORT_MAX))
                rc = moat_errf(err, errlen, "metadata.purpose must be a string of at most %d bytes without NUL",
                               GW_METADATA_SHORT_MAX);
        } else if (strcmp(k, "dependencies") == 0)
            rc = check_dependencies(m, err, errlen);
        else if (strcmp(k, "labels") == 0)
            rc = check_labels(m, err, errlen);
        else
            rc = moat_errf(err, errlen, "metadata: unknown member '%.64s' (prompt, purpose, dependencies, labels)", k);
        if (rc != 0)
            return rc;
    }
    return check_size(v, err, errlen);
}
