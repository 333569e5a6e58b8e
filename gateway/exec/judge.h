/*
 * judge.h - the tenant's policy applied to a parsed execution request
 * (batch execute, streamed execute, a session's `init`): one place that
 * fills policy_request from it.
 */
#ifndef GW_JUDGE_H
#define GW_JUDGE_H

#include "policy.h"
#include "moat_proto.h"
#include "core/worker.h"

/*
 * Judge ereq for endpoint (POLICY_EP_EXECUTE or POLICY_EP_CONNECT) by the
 * tenant's policy p, naming languages through w's runtime table.  A semver
 * range in ereq->version (malloc'ed) is first replaced by the concrete
 * version it picks from that table, when it picks one.  0 when
 * allowed: the effective limits are written into ereq.  -1 when denied: v
 * says why (status, reason, message, rule).
 */
int gw_judge_exec(struct gw_worker *w, const struct tenant_policy *p, unsigned endpoint, struct moat_exec_request *ereq,
                  struct policy_verdict *v);

/*
 * The wall budget of ereq's test cases (after gw_judge_exec): it must end
 * before the gateway stops waiting for the backend (backend_timeout_ms,
 * less the compile timeout in force and a second for the rest), and at most
 * MOAT_MAX_TESTS_WALL_MS.  Not asked: set to that much, 0; asked above it:
 * -1 with a message in err.
 */
int gw_judge_tests_budget(uint64_t backend_timeout_ms, struct moat_exec_request *ereq, char *err, size_t errlen);

#endif /* GW_JUDGE_H */
