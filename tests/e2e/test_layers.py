"""The layers check (.ci/layers) fails when a layer reaches up.

The real tree must pass both checks (.ci/lint runs `includes`, ctest
layers_circles runs `objects` on the build); here each check is run on a
copy of the tree's sources and the script, with one thing broken at a time,
and must refuse it with the line that names it:
  - an include of an upper folder's header (core/ including apis/judge0/);
  - a header of another folder named without its folder (a bare name that
    compiles only through some target's include directory);
  - LAYERS rows that run in a circle, or name a folder without a row;
  - a call from a lower folder to a function defined in an upper one, read
    from real objects compiled here (cc -c), and a circle of two files.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAYERS = os.path.join(SOURCE, ".ci", "layers")
TREES = ["backend", "gateway", "policy", "audit"]


def run(tree, *args):
    p = subprocess.run([sys.executable, os.path.join(tree, ".ci", "layers")] + list(args), capture_output=True, text=True,
                       timeout=120)
    return p.returncode, p.stdout + p.stderr


class Copy:
    """The tree's C sources and .ci/layers under a temporary directory."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="moat-layers-")
        os.makedirs(os.path.join(self.dir, ".ci"))
        shutil.copy(LAYERS, os.path.join(self.dir, ".ci", "layers"))
        for t in TREES:
            for d, dirs, files in os.walk(os.path.join(SOURCE, t)):
                dirs[:] = [x for x in dirs if not x.startswith(".")]
                for f in files:
                    if f.endswith((".c", ".h")):
                        rel = os.path.relpath(os.path.join(d, f), SOURCE)
                        os.makedirs(os.path.dirname(os.path.join(self.dir, rel)), exist_ok=True)
                        shutil.copy(os.path.join(d, f), os.path.join(self.dir, rel))

    def path(self, rel):
        return os.path.join(self.dir, rel)

    def append(self, rel, text):
        with open(self.path(rel), "a") as f:
            f.write(text)

    def edit_layers(self, old, new):
        p = self.path(".ci/layers")
        with open(p) as f:
            s = f.read()
        assert old in s, old
        with open(p, "w") as f:
            f.write(s.replace(old, new, 1))

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


class IncludesTest(unittest.TestCase):
    def setUp(self):
        self.copy = Copy()
        self.addCleanup(self.copy.close)

    def test_the_tree_passes(self):
        rc, out = run(self.copy.dir, "includes")
        self.assertEqual(rc, 0, out)
        self.assertIn("includes follow the layers", out)

    def test_an_upward_include_fails(self):
        self.copy.append("gateway/core/conn.c", '\n#include "apis/judge0/judge0_queue.h"\n')
        rc, out = run(self.copy.dir, "includes")
        self.assertEqual(rc, 1, out)
        self.assertIn("gateway/core/conn.c", out)
        self.assertIn("gateway/core may not call gateway/apis/judge0", out)

    def test_a_sideways_include_fails(self):
        self.copy.append("gateway/auth/apikey.c", '\n#include "net/proxies.h"\n')
        rc, out = run(self.copy.dir, "includes")
        self.assertEqual(rc, 1, out)
        self.assertIn("gateway/auth may not call gateway/net", out)

    def test_a_bare_name_of_another_folder_fails(self):
        self.copy.append("gateway/core/http.c", '\n#include "judge0_queue.h"\n')
        rc, out = run(self.copy.dir, "includes")
        self.assertEqual(rc, 1, out)
        self.assertIn("name it by its path", out)
        self.assertIn("gateway/apis/judge0/judge0_queue.h", out)

    def test_rows_in_a_circle_fail(self):
        self.copy.edit_layers('"gateway/common": ["backend/common"],', '"gateway/common": ["backend/common", "gateway/core"],')
        rc, out = run(self.copy.dir, "includes")
        self.assertEqual(rc, 1, out)
        self.assertIn("the rows run in a circle", out)

    def test_a_folder_without_a_row_fails(self):
        os.makedirs(self.copy.path("gateway/newthing"))
        with open(self.copy.path("gateway/newthing/x.c"), "w") as f:
            f.write("int x;\n")
        rc, out = run(self.copy.dir, "includes")
        self.assertEqual(rc, 1, out)
        self.assertIn("gateway/newthing has no row", out)


@unittest.skipUnless(shutil.which("cc") and shutil.which("nm"), "needs cc and nm")
class ObjectsTest(unittest.TestCase):
    """Objects laid out as a CMake build lays them out (CMakeFiles/T.dir/PATH.o)."""

    def setUp(self):
        self.copy = Copy()
        self.addCleanup(self.copy.close)
        self.build = os.path.join(self.copy.dir, "build")

    def compile(self, rel, text):
        src = self.copy.path(rel)
        os.makedirs(os.path.dirname(src), exist_ok=True)
        with open(src, "w") as f:
            f.write(text)
        folder, name = os.path.split(rel)
        top = folder.split("/")[0]
        obj = os.path.join(self.build, top, "CMakeFiles", "t.dir", os.path.relpath(folder, top), name + ".o")
        os.makedirs(os.path.dirname(obj), exist_ok=True)
        subprocess.run(["cc", "-c", "-o", obj, src], check=True, timeout=60)

    def test_a_downward_call_passes(self):
        self.compile("gateway/core/t_low.c", "int t_low(void) { return 1; }\n")
        self.compile("gateway/apis/judge0/t_high.c", "int t_low(void);\nint t_high(void) { return t_low(); }\n")
        rc, out = run(self.copy.dir, "objects", self.build)
        self.assertEqual(rc, 0, out)

    def test_an_upward_call_fails(self):
        self.compile("gateway/apis/judge0/t_high.c", "int t_high(void) { return 2; }\n")
        self.compile("gateway/core/t_low.c", "int t_high(void);\nint t_low(void) { return t_high(); }\n")
        rc, out = run(self.copy.dir, "objects", self.build)
        self.assertEqual(rc, 1, out)
        self.assertIn("gateway/core/t_low.c calls gateway/apis/judge0/t_high.c: t_high", out)

    def test_a_circle_fails(self):
        self.compile("gateway/core/t_a.c", "int t_b(void);\nint t_a(void) { return t_b(); }\n")
        self.compile("gateway/core/t_b.c", "int t_a(void);\nint t_b(void) { return t_a(); }\n")
        rc, out = run(self.copy.dir, "objects", self.build)
        self.assertEqual(rc, 1, out)
        self.assertIn("a circle of 2 files", out)


if __name__ == "__main__":
    unittest.main()
