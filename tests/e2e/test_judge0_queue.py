"""The Judge0 submissions queue (gateway/apis/judge0/judge0_queue.c) through the real
gateway and backend: fairness across tenants (tenant A queues 200, tenant B's
one submission starts within one turn, measured by the order of the runs'
starts as the result records give it, not by clocks), FIFO within a tenant,
the caps (503 queue_full, 429 tenant_queue_full, Retry-After, Judge0's and
moat's error shape, a batch refused whole), the statuses In Queue ->
Processing -> the result, nothing lost (every accepted token ends in a final
status), and a SIGTERM with submissions waiting: they stay In Queue in the
store and read as Internal Error after the restart, and the gateway exits
cleanly (no sanitizer report)."""

import os
import pwd
import shutil
import signal
import tempfile
import threading
import unittest

from moat_harness import BUSY_MACHINE_WALL_MS, Stack, wait_until

JUDGE0 = "rate: {per_second: 1000, burst: 1000}\nmax_in_flight: 1\nendpoints: [execute, runtimes, submissions, languages]\n"
MOAT = pwd.getpwnam("moat")
FINAL = 3  # status ids from 3 on are final


def sleeper(seconds, out):
    """A submission that runs `seconds` (the sleep is the program under test: it holds the slot that
    long, bounded by the 3 s run ceiling), then prints out."""
    return {"source_code": "import time\ntime.sleep(%s)\nprint(%r)" % (seconds, out), "language_id": 71}


class QueueClient:
    """Calls shared by the test classes (mixed into unittest.TestCase)."""

    def call(self, method, path, body=None, tenant="a"):
        return self.stack.request(method, path, body, token=self.stack.tokens[tenant])

    def submit(self, body, tenant="a"):
        st, _, data = self.call("POST", "/submissions?wait=false", body, tenant)
        self.assertEqual(st, 201, data)
        return data["token"]

    def submit_batch(self, bodies, tenant="a"):
        st, _, data = self.call("POST", "/submissions/batch", {"submissions": bodies}, tenant)
        self.assertEqual(st, 201, data)
        return [d["token"] for d in data]

    def status(self, token, tenant="a"):
        st, _, data = self.call("GET", "/submissions/%s?fields=status,stdout,message" % token, tenant=tenant)
        self.assertEqual(st, 200, data)
        return data

    def all_final(self, tokens, tenant="a", timeout=300):
        """Poll 20 at a time until every token has a final status; their results."""
        got = {}

        def done():
            for i in range(0, len(tokens), 20):
                part = [t for t in tokens[i:i + 20] if t not in got]
                if not part:
                    continue
                st, _, data = self.call("GET", "/submissions/batch?tokens=%s&fields=status,stdout,token" % ",".join(part),
                                        tenant=tenant)
                self.assertEqual(st, 200, data)
                for r in data["submissions"]:
                    self.assertIsNotNone(r, "an accepted token was lost")
                    if r["status"]["id"] >= FINAL:
                        got[r["token"]] = r
            return len(got) == len(tokens)
        wait_until(done, "%d submissions to finish" % len(tokens), timeout=timeout)
        return [got[t] for t in tokens]

    def queue_of(self, tokens):
        """token -> the judge0.queue member ({seq, ahead}) of its result record."""
        want, out = set(tokens), {}

        def found():
            for r in self.stack.audit_records():
                j = r.get("judge0") or {}
                if r.get("type") == "result" and j.get("token") in want:
                    out[j["token"]] = j["queue"]
            return len(out) == len(want)
        wait_until(found, "the result records")
        return out


class FairQueueTest(QueueClient, unittest.TestCase):
    MAX_RUNNING = 2

    @classmethod
    def setUpClass(cls):
        cls.stack = Stack(tenants=[("a", JUDGE0, ""), ("b", JUDGE0, "")],
                          extra_config="submissions:\n  max_running: %d\n  queue_max: 1000\n  queue_max_per_tenant: 400\n"
                          % cls.MAX_RUNNING).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()

    def test_one_tenants_flood_delays_another_by_one_turn(self):
        # A: 200 submissions, 8 batches of 20 and 40 singles, interleaved;
        # each run takes a while, so a backlog builds behind max_running
        a_tokens = []
        for i in range(8):
            a_tokens += self.submit_batch([sleeper(0.1, "a%d" % (i * 25 + k)) for k in range(20)])
            for k in range(5):
                a_tokens.append(self.submit(sleeper(0.1, "a%d" % (i * 25 + 20 + k))))
        self.assertEqual(len(a_tokens), 200)
        b_token = self.submit({"source_code": "print('b')", "language_id": 71}, tenant="b")

        # nothing lost: every accepted token ends, and each ran its own program
        a_results = self.all_final(a_tokens)
        self.assertEqual([r["status"]["id"] for r in a_results], [3] * 200)
        self.assertEqual(self.all_final([b_token], tenant="b")[0]["stdout"], "b\n")

        queue = self.queue_of(a_tokens + [b_token])
        b = queue[b_token]
        a_seqs = [queue[t]["seq"] for t in a_tokens]
        a_after_b = sum(1 for s in a_seqs if s > b["seq"])
        if a_after_b == 0:
            self.skipTest("this host ran A's whole backlog before B was queued: no queue to be fair in")
        # B started within one turn: at most one of A's runs (one per other
        # tenant waiting; the bound is max_running) started between
        # B's enqueue and its start
        between = b["seq"] - b["ahead"] - 1
        self.assertLessEqual(between, 1, b)
        self.assertLessEqual(between, self.MAX_RUNNING)
        # and A's runs started in the order A sent them (FIFO per tenant)
        self.assertEqual(a_seqs, sorted(a_seqs))
        self.assertEqual(len(set(a_seqs + [b["seq"]])), 201)


def store_dir():
    d = tempfile.mkdtemp(prefix="moat-e2e-queue-store-")
    os.chown(d, MOAT.pw_uid, MOAT.pw_gid)
    os.chmod(d, 0o700)
    return d


class QueueCapsTest(QueueClient, unittest.TestCase):
    """max_running 1, queue_max 6, queue_max_per_tenant 4, results in a directory."""

    @classmethod
    def setUpClass(cls):
        cls.dir = store_dir()
        cls.stack = Stack(tenants=[("a", JUDGE0, ""), ("b", JUDGE0, ""), ("c", JUDGE0, ""),
                                   ("cpu", JUDGE0 + "cpu_seconds_per_minute: 1\nlimits:\n  run_timeout_ms: %d\n"
                                    % BUSY_MACHINE_WALL_MS, "")],
                          backend_args=("-o", "run_timeout=%d" % BUSY_MACHINE_WALL_MS),
                          extra_config="submissions:\n  store_dir: %s\n  max_running: 1\n  queue_max: 6\n"
                          "  queue_max_per_tenant: 4\n" % cls.dir).start()

    @classmethod
    def tearDownClass(cls):
        cls.stack.stop()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def refused(self, got, status, code, text):
        st, headers, data = got
        self.assertEqual(st, status, data)
        self.assertEqual(data["code"], code)
        self.assertIn(text, data["message"])
        self.assertEqual(data["error"], data["message"])  # Judge0's member
        self.assertEqual(data["request_id"], headers["x-request-id"])
        self.assertEqual(headers.get("retry-after"), "2")
        return data

    def test_caps_503_429_and_a_batch_refused_whole(self):
        blocker = self.submit(sleeper(2.5, "blocker"))  # runs: the one place (3 s is the run ceiling)
        queued = [self.submit({"source_code": "print(%d)" % i, "language_id": 71}) for i in range(4)]
        self.assertEqual([self.status(t)["status"]["id"] for t in queued], [1] * 4)  # In Queue
        # a's share (4) is full: a single and a batch get 429; the batch whole
        self.refused(self.call("POST", "/submissions", {"source_code": "print(5)", "language_id": 71}), 429,
                     "tenant_queue_full", "this tenant's share of the submissions queue is full")
        data = self.refused(self.call("POST", "/submissions/batch", {"submissions": [sleeper(0, "x")] * 2}), 429,
                            "tenant_queue_full", "the batch is refused whole")
        self.assertNotIn("submissions", data)
        # all tenants: 4 waiting, queue_max 6: b's batch of 3 does not fit (503), of 2 does
        self.refused(self.call("POST", "/submissions/batch", {"submissions": [sleeper(0, "x")] * 3}, "b"), 503, "queue_full",
                     "none of it was queued")
        b_tokens = self.submit_batch([{"source_code": "print('b%d')" % i, "language_id": 71} for i in range(2)], "b")
        self.refused(self.call("POST", "/submissions?wait=false", {"source_code": "1", "language_id": 71}, "c"), 503,
                     "queue_full", "the submissions queue is full")
        # synchronous runs do not queue: c's wait=true goes ahead
        st, _, data = self.call("POST", "/submissions?wait=true", {"source_code": "print('now')", "language_id": 71}, "c")
        self.assertEqual((st, data.get("stdout")), (201, "now\n"), data)

        # nothing lost, and the room comes back
        self.assertEqual([r["stdout"] for r in self.all_final([blocker] + queued)], ["blocker\n", "0\n", "1\n", "2\n", "3\n"])
        self.assertEqual([r["stdout"] for r in self.all_final(b_tokens, "b")], ["b0\n", "b1\n"])
        again = self.submit_batch([{"source_code": "print(%d)" % i, "language_id": 71} for i in range(4)])
        self.assertEqual([r["stdout"] for r in self.all_final(again)], ["0\n", "1\n", "2\n", "3\n"])
        # the refusals are in the audit trail with their reason
        denials = [r for r in self.stack.audit_records() if r.get("decision") == "denied" and r.get("reason") == "queue"]
        self.assertEqual(sorted(r["status"] for r in denials), [429, 429, 503, 503])

    def test_in_queue_then_processing_then_result(self):
        blocker = self.submit(sleeper(2, "blocker"))
        token = self.submit(sleeper(1.5, "t"))
        self.assertEqual(self.status(token)["status"], {"id": 1, "description": "In Queue"})
        seen = []

        def final():
            s = self.status(token)["status"]["id"]
            if not seen or seen[-1] != s:
                seen.append(s)
            return s >= FINAL
        wait_until(final, "the queued submission to finish", timeout=120)
        self.assertEqual(seen, [1, 2, 3])  # In Queue, Processing (1.5 s of it), Accepted
        self.assertEqual(self.all_final([blocker])[0]["stdout"], "blocker\n")

    def test_queued_posts_take_no_in_flight_slot(self):
        # a (max_in_flight 1) has a synchronous run going: its one slot is held
        held = {}

        def sync_run():  # again while a probe below holds the slot for a moment
            while True:
                held["got"] = self.call("POST", "/submissions?wait=true", sleeper(2.5, "sync"), "b")
                if held["got"][0] != 429:
                    return
        t = threading.Thread(target=sync_run)
        t.start()
        try:
            wait_until(lambda: self.call("POST", "/submissions?wait=true", {"source_code": "1", "language_id": 71},
                                         "b")[0] == 429, "b's one slot to be held")
            st, _, data = self.call("POST", "/submissions?wait=true", {"source_code": "1", "language_id": 71}, "b")
            self.assertEqual((st, data.get("code")), (429, "too_many_in_flight"), data)
            # queued work still gets in: it waits in the queue, not in a slot
            single = self.submit({"source_code": "print('q')", "language_id": 71}, "b")
            batch = self.submit_batch([{"source_code": "print(%d)" % i, "language_id": 71} for i in range(2)], "b")
        finally:
            t.join()
        self.assertEqual((held["got"][0], held["got"][2].get("stdout")), (201, "sync\n"), held)
        self.assertEqual([r["stdout"] for r in self.all_final([single] + batch, "b")], ["q\n", "0\n", "1\n"])

    def test_queued_runs_are_charged_to_the_cpu_budget(self):
        # cpu may use 1 s of CPU a minute: a queued run that burns 1.2 s is
        # charged when it ends, and then its next POST is refused
        # (its wall clock is raised: 1.2 s of CPU can take far longer on a busy machine)
        burn = {"source_code": "import time\nwhile time.process_time() < 1.2: pass\nprint('burnt')", "language_id": 71,
                "wall_time_limit": BUSY_MACHINE_WALL_MS / 1000}
        token = self.submit(burn, "cpu")
        self.assertEqual(self.all_final([token], "cpu")[0]["stdout"], "burnt\n")

        def refused():
            st, _, data = self.call("POST", "/submissions", {"source_code": "1", "language_id": 71}, "cpu")
            self.assertIn(st, (201, 429), data)
            return st == 429 and data["code"] == "cpu_quota_exhausted"
        wait_until(refused, "the run's CPU time to be charged")  # charged as its result is recorded
        st, _, data = self.call("POST", "/submissions/batch", {"submissions": [burn]}, "cpu")
        self.assertEqual((st, data.get("code")), (429, "cpu_quota_exhausted"), data)

    def test_sigterm_keeps_waiting_submissions_in_queue(self):
        blocker = self.submit(sleeper(2.5, "lost"))
        waiting = self.submit_batch([{"source_code": "print(%d)" % i, "language_id": 71} for i in range(3)])
        self.assertEqual(self.status(blocker)["status"]["id"], 2)
        self.assertEqual([self.status(t)["status"]["id"] for t in waiting], [1, 1, 1])
        g = self.stack.gateway
        g.send_signal(signal.SIGTERM)
        self.assertEqual(g.wait(timeout=60), 0)
        self.stack.gateway_log.close()
        log = self.stack.log("gateway")
        self.assertNotIn("Sanitizer", log)
        self.assertNotIn("runtime error", log)
        self.stack.start_gateway()
        # the run and the queue died with that gateway: Internal Error, saying so
        for t in [blocker] + waiting:
            data = self.status(t)
            self.assertEqual(data["status"], {"id": 13, "description": "Internal Error"}, t)
            self.assertIn("the gateway restarted", data["message"])
        # and the new gateway's queue works
        self.assertEqual(self.all_final([self.submit({"source_code": "print('after')", "language_id": 71})])[0]["stdout"],
                         "after\n")


if __name__ == "__main__":
    unittest.main()
