/*
 * metadata.h - a request's `metadata` (issue 12 item 4): what a reviewer
 * needs beside the code to judge a run (the prompt that produced it, its
 * purpose, the dependencies it assumes, labels), checked here and stored
 * verbatim in the audit packet.  See metadata.c.
 */
#ifndef GW_METADATA_H
#define GW_METADATA_H

#include <stddef.h>

#include <jansson.h>

/*
 * Check v, the value of a request's "metadata" member.  0 when it is a
 * metadata object (metadata.c says what one holds); -1 with err naming the
 * offending member ("metadata.labels.team must be ...") for a 400.
 */
int gw_metadata_check(json_t *v, char *err, size_t errlen);

#endif
