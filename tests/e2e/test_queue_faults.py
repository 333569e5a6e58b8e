"""Faults of the shared submissions queue (submissions: {store: redis, queue: redis}): Redis
restarted or frozen under a queue, a tenant at its caps across gateways, a host's backend or
gateway killed while it runs a claimed entry, and fairness across tenants across hosts.

The hosts, Redis and helpers are test_queue_redis's: two hosts, each one moat-backend with one
batch slot (-j 1) and its own gateway and audit trail, on one real redis-server (appendonly,
fsync on every write, here: the queue is only as durable as that).

How the tests hold a slot without timing anything: a submission's program announces itself
(writes its name to /tmp/moat-held in its box) and waits for a file the test writes into that
box (moat_harness.held_roots / release).  So "both slots busy" is two boxes seen holding, "the
first two claims" are the two programs holding once the blockers are released, and every wait
is wait_until on an event.  No assertion is on how long anything took.

What is checked:
  - Redis SIGTERMed and started again on its directory (AOF) while submissions wait and both
    slots run: every accepted token ends exactly once (Accepted, its own stdout), none lost;
  - Redis frozen (SIGSTOP, longer than the lease) while submissions wait and the running ones
    end: nothing lost once it answers again, and no submission ran twice (one result record
    per token across both trails, attempt 1: no host died, so nothing may be taken over);
  - queue_max_per_tenant = 2 counted in Redis: a batch that does not fit the tenant's room is
    refused whole (429 tenant_queue_full, no token of it exists), the share filled through host
    a is full on host b too (429 with Retry-After), another tenant is still accepted;
  - the backend of the host running a claimed entry killed -9 mid-run, then that host's
    gateway: host b takes the entry over and it ends once, Accepted, attempt 2;
  - the gateway killed -9 mid-run with its backend alive (the program goes on and ends there,
    unheard): host b takes the entry over, it ends once (one result record, attempt 2, on b);
  - fair across tenants across hosts: alpha queues 6, then beta 1, while both slots are busy:
    the first two claims once the slots free are alpha's first and beta's (what runs in the
    two boxes, not when anything finished).
Skipped (with the reason) when redis-server is not installed.
"""

import base64
import os
import signal
import time
import unittest

import test_queue_redis as tqr
from moat_harness import Stack, held_roots, release_all, wait_until
from test_queue_redis import HAVE_REDIS, LEASE_MS, PREFIX, Host, Redis, finished

TENANTS = tqr.TENANTS
WALL_S = 20  # the tenants' run_timeout_ms: a held program has this long to be released


def held(name):
    """Python source: write name to /tmp/moat-held, wait for /tmp/moat-release, print name."""
    return ("import os, time\nf = open('/tmp/moat-held', 'w')\nf.write(%r)\nf.close()\n"
            "while not os.path.exists('/tmp/moat-release'):\n    time.sleep(0.01)\nprint(%r)\n" % (name, name))


def quick(name):
    return "print(%r)\n" % name


def held_names(host):
    """The names written by the held programs in host's boxes ('' while one has not written yet)."""
    names = []
    for root in held_roots(host.stack.tag):
        try:
            with open(os.path.join(root, "tmp", "moat-held")) as f:
                names.append(f.read())
        except OSError:
            pass
    return names


def stdout_of(done):
    return base64.b64decode(done["stdout"] or "").decode()


class FaultsBase(unittest.TestCase):
    """Two hosts on one Redis, as test_queue_redis.QueueTest's, each test starting with both
    hosts whole (backend, gateway), Redis answering and no box held."""

    AOF = True
    SUBMISSIONS = ""

    # QueueTest's helpers (taken from the module, not imported: unittest would run its tests here)
    wait_accepting = tqr.QueueTest.wait_accepting
    wait_all = tqr.QueueTest.wait_all
    result_records = tqr.QueueTest.result_records

    @classmethod
    def setUpClass(cls):
        cls.dirs = Stack(tenants=TENANTS, audit=False)  # only its directory, for Redis (stop() removes it)
        cls.tmp = cls.dirs.tmp
        cls.redis = Redis(cls.tmp, aof=cls.AOF)
        cls.redis.start()
        cls.hosts = []
        try:
            cls.a = Host("a", cls.redis, submissions=cls.SUBMISSIONS)
            cls.hosts.append(cls.a)
            cls.a.start()
            cls.b = Host("b", cls.redis, first=cls.a, submissions=cls.SUBMISSIONS)
            cls.hosts.append(cls.b)
            cls.b.start()
        except BaseException:
            cls.tearDownClass()
            raise

    @classmethod
    def tearDownClass(cls):
        for h in cls.hosts:
            release_all(h.stack.tag)
            h.stop()
        if cls.redis.proc is not None and cls.redis.proc.poll() is None:
            cls.redis.proc.send_signal(signal.SIGCONT)
        if cls.redis.proc is not None:
            cls.redis.stop()
        cls.dirs.stop()

    def setUp(self):
        if self.redis.proc is None:
            self.redis.start()
        for h in self.hosts:
            if h.stack.backend is None or h.stack.backend.poll() is not None:
                h.stack.stop_backend()
                h.stack.start_backend()
            if h.stack.gateway is None:
                h.start_gateway()
        for h in self.hosts:
            self.wait_accepting(h)

    def tearDown(self):
        if self.redis.proc is not None and self.redis.proc.poll() is None:
            self.redis.proc.send_signal(signal.SIGCONT)  # a test that failed while Redis was frozen
        # a test that failed with programs held: let them go, so the next test starts idle
        for h in self.hosts:
            wait_until(lambda: (release_all(h.stack.tag), not held_roots(h.stack.tag))[1],
                       "host %s's held programs to end" % h.name)

    # ---- helpers

    def submit_ok(self, host, tenant, source, **extra):
        st, _, data = host.submit(tenant, source, wall_time_limit=WALL_S, **extra)
        self.assertEqual(st, 201, data)
        return data["token"]

    def block_both(self, tenant="gamma"):
        """Both hosts' single slots busy with a held program of tenant: two tokens, the first
        held on one host before the second is sent (so the second is the other host's)."""
        first = self.submit_ok(self.a, tenant, held("blocker-1"))
        wait_until(lambda: len(held_roots(self.a.stack.tag)) + len(held_roots(self.b.stack.tag)) == 1,
                   "the first blocker to be held on a host")
        second = self.submit_ok(self.b, tenant, held("blocker-2"))
        wait_until(lambda: held_roots(self.a.stack.tag) and held_roots(self.b.stack.tag),
                   "a blocker to be held on each host")
        return [first, second]

    def release_everything(self, tokens, tenant_of, timeout=None):
        """Releases every held program, again and again (each release lets a slot claim the next,
        which holds in turn), until every token has ended; their records."""
        done = {}

        def all_done():
            for h in self.hosts:
                release_all(h.stack.tag)
            for t in tokens:
                if t not in done:
                    d = finished(self.b, tenant_of[t], t)
                    if d:
                        done[t] = d
            return len(done) == len(tokens)
        def unfinished():
            return repr({t: self.b.get(tenant_of[t], t)[2].get("status") for t in tokens if t not in done})
        wait_until(all_done, "every submission to end", timeout=timeout, detail=unfinished)
        return done

    def wait_acknowledged(self, tokens):
        """No entry holding one of tokens is left in any stream (the ack follows the final record)."""
        def left():
            out = []
            for tenant in ("alpha", "beta", "gamma"):
                text = self.redis.cli("XRANGE", PREFIX + "q:s:" + tenant.encode().hex(), "-", "+")
                out += [t for t in tokens if t in text]
            return out
        wait_until(lambda: not left(), "every entry acknowledged", detail=lambda: "left: %r; pending: %r" % (
            left(), [self.redis.cli("XPENDING", PREFIX + "q:s:" + t.encode().hex(), "moat", "-", "+", "10")
                     for t in ("alpha", "beta", "gamma")]))

    def results_by_token(self, tokens):
        """Every result record of tokens in both trails: token -> [(host name, record)]."""
        by = {t: [] for t in tokens}
        for h in self.hosts:
            for r in self.result_records(h, tokens):
                by[r["judge0"]["token"]].append((h.name, r))
        return by

    def assert_ran_once(self, tokens):
        """Each token has exactly one result record across both trails, of attempt 1."""
        by = self.results_by_token(tokens)
        for t, recs in by.items():
            self.assertEqual(len(recs), 1, "token %s: %d result records across the trails (%s)"
                             % (t, len(recs), [(n, r["judge0"].get("queue"), r["judge0"]["status"]) for n, r in recs]))
            self.assertEqual(recs[0][1]["judge0"]["queue"]["attempt"], 1,
                             "token %s was taken over though no host died: %s" % (t, recs[0][1]["judge0"]))

    def assert_accepted(self, done, names):
        for t, name in names.items():
            self.assertEqual(done[t]["status"]["id"], 3, done[t])
            self.assertEqual(stdout_of(done[t]), name + "\n", done[t])


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class QueueFaultsTest(FaultsBase):
    AOF = True

    def queue_waiting(self):
        """Submissions of alpha and beta sent to both hosts while both slots are busy, plus a
        batch of two (not grouped: Python): {token: (tenant, name)}."""
        sent = {}
        for i in range(3):
            sent[self.submit_ok(self.a if i % 2 == 0 else self.b, "alpha", quick("alpha-%d" % i))] = ("alpha", "alpha-%d" % i)
        for i in range(2):
            sent[self.submit_ok(self.b, "beta", quick("beta-%d" % i))] = ("beta", "beta-%d" % i)
        body = {"submissions": [{"language_id": tqr.PYTHON, "source_code": tqr.b64(quick("batch-%d" % i)),
                                 "wall_time_limit": WALL_S} for i in range(2)]}
        st, _, data = self.a.stack.request("POST", "/submissions/batch?base64_encoded=true", body,
                                           token=self.a.stack.tokens["beta"])
        self.assertEqual(st, 201, data)
        for i, d in enumerate(data):
            sent[d["token"]] = ("beta", "batch-%d" % i)
        # they wait in the streams: nothing of theirs runs while the blockers hold the slots
        for t, (tenant, _) in sent.items():
            st, _, rec = self.a.get(tenant, t)
            self.assertEqual((st, rec["status"]["id"]), (200, 1), rec)
        self.assertEqual(self.redis.cli("HGET", PREFIX + "q:w", "*"), str(len(sent)))
        return sent

    def test_redis_restarted_with_aof_loses_nothing(self):
        blockers = self.block_both()
        sent = self.queue_waiting()
        self.redis.stop(signal.SIGTERM)
        self.redis.start()  # the same directory: the AOF is read back
        self.assertEqual(self.redis.cli("HGET", PREFIX + "q:w", "*"), str(len(sent)), "the waiting count came back")
        tenant_of = {t: v[0] for t, v in sent.items()}
        tenant_of.update({t: "gamma" for t in blockers})
        done = self.release_everything(list(tenant_of), tenant_of)
        self.assert_accepted(done, {t: v[1] for t, v in sent.items()})
        self.assert_accepted(done, dict(zip(blockers, ["blocker-1", "blocker-2"])))
        self.assert_ran_once(list(tenant_of))
        self.wait_acknowledged(list(tenant_of))

    def test_redis_frozen_while_entries_wait_runs_each_once(self):
        blockers = self.block_both()
        sent = self.queue_waiting()
        self.redis.proc.send_signal(signal.SIGSTOP)
        try:
            # the running ones end while Redis does not answer: their results wait in the gateways
            for h in self.hosts:
                release_all(h.stack.tag)
            for h in self.hosts:
                wait_until(lambda: not held_roots(h.stack.tag), "host %s's blocker to end" % h.name)
            # longer than the lease: every heartbeat key's time runs out meanwhile (the fault's size,
            # not a measurement)
            time.sleep(2 * LEASE_MS / 1000)
        finally:
            self.redis.proc.send_signal(signal.SIGCONT)
        tenant_of = {t: v[0] for t, v in sent.items()}
        tenant_of.update({t: "gamma" for t in blockers})
        done = self.release_everything(list(tenant_of), tenant_of)
        self.assert_accepted(done, {t: v[1] for t, v in sent.items()})
        self.assert_accepted(done, dict(zip(blockers, ["blocker-1", "blocker-2"])))
        self.assert_ran_once(list(tenant_of))
        self.wait_acknowledged(list(tenant_of))

    def take_over(self, kill):
        """A held program claimed by host a alone (b's gateway stopped); kill(token) while it runs
        in a's box; then b's gateway: it takes the entry over.  The token's final record."""
        self.b.stop_gateway()
        token = self.submit_ok(self.a, "gamma", held("victim"))
        wait_until(lambda: held_names(self.a) == ["victim"], "host a to run it")
        kill(token)
        self.b.start_gateway()
        # meanwhile pending (the queue owns it), never an Internal Error
        st, _, data = self.b.get("gamma", token)
        self.assertEqual(st, 200, data)
        self.assertIn(data["status"]["id"], (1, 2), data)
        # b runs it again: held in b's box; let it go
        wait_until(lambda: held_names(self.b) == ["victim"], "host b to take it over and run it")
        done = self.release_everything([token], {token: "gamma"})
        self.assertEqual(done[token]["status"]["id"], 3, done[token])
        self.assertEqual(stdout_of(done[token]), "victim\n")
        return token, done[token]

    def assert_ended_once_on_b(self, token):
        by = self.results_by_token([token])[token]
        final = [(n, r) for n, r in by if r["judge0"]["status"]["id"] > 2]
        self.assertEqual([n for n, _ in by], ["b"], "one result record, host b's: %r"
                         % [(n, r["judge0"]) for n, r in by])
        self.assertEqual(len(final), 1)
        self.assertEqual(final[0][1]["judge0"]["queue"]["attempt"], 2, final[0][1]["judge0"])
        self.assertEqual(final[0][1]["judge0"]["status"]["id"], 3, final[0][1]["judge0"])
        self.wait_acknowledged([token])

    def test_backend_killed_mid_run_then_its_gateway(self):
        def kill(token):
            self.a.stack.backend.send_signal(signal.SIGKILL)
            self.a.stack.backend.wait(timeout=30)
            # the gateway has seen its backend go (its answer to the run is in its trail) before it dies:
            # whatever it did about the run is done
            wait_until(lambda: self.result_records(self.a, [token]), "host a's gateway to record the lost run")
            st, _, rec = self.a.get("gamma", token)
            self.assertIn(rec.get("status", {}).get("id"), (1, 2),
                          "host a's gateway ended the submission when its backend died (%r), instead of leaving the "
                          "entry to be run again elsewhere" % rec)
            self.a.kill_gateway()
            self.a.stack.stop_backend()
        token, _ = self.take_over(kill)
        by = self.results_by_token([token])[token]
        on_b = [r for n, r in by if n == "b"]
        self.assertEqual(len(on_b), 1, by)
        self.assertEqual(on_b[0]["judge0"]["queue"]["attempt"], 2, on_b[0]["judge0"])
        # a's record of the lost run is not a final one the store kept: the token's only final result is b's
        st, _, data = self.b.get("gamma", token)
        self.assertEqual(stdout_of(data), "victim\n")

    def test_gateway_killed_mid_run_ends_once(self):
        def kill(token):
            self.a.kill_gateway()
            # the backend goes on with the run and ends it, but nobody hears the answer
            release_all(self.a.stack.tag)
            wait_until(lambda: not held_roots(self.a.stack.tag), "host a's run to end without its gateway")
        token, done = self.take_over(kill)
        self.assert_ended_once_on_b(token)
        # host a back: its restart changes nothing of the record (written once)
        full = "/submissions/%s?base64_encoded=true&fields=*" % token
        st, _, before = self.b.stack.request("GET", full, token=self.b.stack.tokens["gamma"])
        self.assertEqual(st, 200, before)
        self.a.start_gateway()
        st, _, again = self.a.stack.request("GET", full, token=self.a.stack.tokens["gamma"])
        self.assertEqual(st, 200, again)
        self.assertEqual(again, before)
        self.assertEqual(stdout_of(again), "victim\n")

    def test_fair_across_tenants_across_hosts(self):
        blockers = self.block_both()
        alpha = [self.submit_ok(self.a if i % 2 == 0 else self.b, "alpha", held("alpha-%d" % i)) for i in range(6)]
        beta = self.submit_ok(self.b, "beta", held("beta-0"))
        self.assertEqual(self.redis.cli("HGET", PREFIX + "q:w", "*"), "7")
        for h in self.hosts:
            release_all(h.stack.tag)  # the blockers end; each host's slot claims one
        # the two claims that follow hold the two slots: what they run is the order's measure
        first_two = wait_until(lambda: (lambda n: len(n) == 2 and all(n) and n)(
            [x for h in self.hosts for x in held_names(h) if not x.startswith("blocker")]),
            "the first claim on each host to hold its slot")
        self.assertEqual(sorted(first_two), ["alpha-0", "beta-0"],
                         "beta's one submission waits one turn, not alpha's backlog")
        # the store says the same: those two Processing, the rest In Queue
        statuses = {t: self.a.get(tn, t)[2]["status"]["id"] for t, tn in [(t, "alpha") for t in alpha] + [(beta, "beta")]}
        self.assertEqual(sorted(t for t, s in statuses.items() if s == 2), sorted([alpha[0], beta]), statuses)
        tenant_of = {t: "alpha" for t in alpha}
        tenant_of[beta] = "beta"
        tenant_of.update({t: "gamma" for t in blockers})
        done = self.release_everything(list(tenant_of), tenant_of)
        self.assert_accepted(done, dict([(t, "alpha-%d" % i) for i, t in enumerate(alpha)] + [(beta, "beta-0")]))
        self.assert_ran_once(list(tenant_of))


@unittest.skipUnless(HAVE_REDIS, "redis-server is not installed (Debian: apt-get install redis-server)")
class TenantCapsTest(FaultsBase):
    AOF = False
    SUBMISSIONS = "  queue_max_per_tenant: 2\n"

    def wait_accepting(self, host):
        """QueueTest's ten in a row would not fit a share of two; Redis is never down here: one
        accepted submission that ends is enough."""
        token = self.submit_ok(host, "beta", quick("ready"))
        self.wait_all(host, "beta", [token])

    def assert_tenant_full(self, st, headers, data):
        self.assertEqual(st, 429, data)
        self.assertEqual(data["code"], "tenant_queue_full", data)
        self.assertIn("retry-after", headers)
        self.assertGreaterEqual(int(headers["retry-after"]), 1)

    def test_tenant_over_its_caps_across_gateways(self):
        blockers = self.block_both()
        first = self.submit_ok(self.a, "alpha", quick("alpha-0"))
        # a batch of two with room for one: refused whole, on the other gateway
        body = {"submissions": [{"language_id": tqr.PYTHON, "source_code": tqr.b64(quick("batch-%d" % i)),
                                 "wall_time_limit": WALL_S} for i in range(2)]}
        st, headers, data = self.b.stack.request("POST", "/submissions/batch?base64_encoded=true", body,
                                                 token=self.b.stack.tokens["alpha"])
        self.assert_tenant_full(st, headers, data)
        decision = [r for r in self.b.records() if r.get("request_id") == data["request_id"] and r.get("type") == "request"]
        self.assertEqual(len(decision), 1, decision)
        refused = [e["token"] for e in decision[0]["judge0"]["batch"]]
        self.assertEqual(len(refused), 2, decision[0])
        # the rest of the tenant's share through host a
        second = self.submit_ok(self.a, "alpha", quick("alpha-1"))
        self.assertEqual(self.redis.cli("HGET", PREFIX + "q:w", b"alpha".hex()), "2")
        # full on host b too: counted in Redis
        self.assert_tenant_full(*self.b.submit("alpha", quick("over")))
        self.assert_tenant_full(*self.a.submit("alpha", quick("over")))
        # another tenant is still accepted
        other = self.submit_ok(self.b, "beta", quick("beta-0"))
        self.assertEqual(self.redis.cli("HGET", PREFIX + "q:w", "*"), "3")
        tenant_of = {first: "alpha", second: "alpha", other: "beta"}
        tenant_of.update({t: "gamma" for t in blockers})
        done = self.release_everything(list(tenant_of), tenant_of)
        self.assert_accepted(done, {first: "alpha-0", second: "alpha-1", other: "beta-0"})
        self.assert_ran_once(list(tenant_of))
        # no token of the refused batch exists: not on any gateway, not in the store, never run
        for t in refused:
            for h in self.hosts:
                st, _, data = h.get("alpha", t)
                self.assertEqual(st, 404, data)
            self.assertEqual(self.redis.cli("EXISTS", "%sj:%s:%s" % (PREFIX, b"alpha".hex(), t)), "0")
        self.assertEqual(self.results_by_token(refused), {t: [] for t in refused})
        self.assertEqual(self.redis.cli("XLEN", PREFIX + "q:s:" + b"alpha".hex()), "0")


if __name__ == "__main__":
    unittest.main()
