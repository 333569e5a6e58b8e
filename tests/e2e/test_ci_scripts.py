"""The CI's own scripts keep their promises (.ci/install-deps, .ci/quickstart).

What is checked:
  - `install-deps demo` installs what the demo needs and nothing the tests
    alone use: every library the build links (each pkg-config module and
    CMake package CMakeLists.txt asks for) comes from a package of the demo
    set, as does the demo's one language (python, its manifest's
    version_package); the test tools (qemu, a kernel image, clang, wrk,
    Redis, gVisor, the linters, cmocka, the other languages) are not in it;
  - the test set holds the demo set;
  - a set install-deps does not know is refused with one line (exit 2),
    and `quickstart` refuses an unknown command the same way.
The package owning each file is asked of dpkg, so a library moved to another
package shows here, not on a fresh machine.
"""

import json
import os
import re
import subprocess
import unittest

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
INSTALL_DEPS = os.path.join(SOURCE, ".ci", "install-deps")
QUICKSTART = os.path.join(SOURCE, ".ci", "quickstart")
TEST_ONLY = ["qemu-system-x86", "linux-image-amd64", "clang", "wrk", "redis-server", "runsc", "cppcheck",
             "clang-format", "libcmocka-dev", "mandoc", "openjdk-17-jdk-headless", "golang-go", "rustc", "nodejs", "hyperfine"]


def package_set(name):
    p = subprocess.run(["sh", INSTALL_DEPS, "--list", name], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise AssertionError("install-deps --list %s: exit %d: %s" % (name, p.returncode, p.stderr))
    return set(p.stdout.split())


def owner(path):
    """The Debian package that installed path (dpkg -S), without its architecture."""
    p = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:  # a path through a symbolic link dpkg does not know (usrmerge)
        p = subprocess.run(["dpkg", "-S", os.path.realpath(path)], capture_output=True, text=True, timeout=30)
    if p.returncode != 0:
        raise AssertionError("no package owns %s: %s" % (path, p.stderr))
    return p.stdout.split(":", 1)[0].split(",")[0].strip()


def build_modules():
    """pkg-config modules and CMake packages the build needs (not the tests' cmocka)."""
    with open(os.path.join(SOURCE, "CMakeLists.txt")) as f:
        text = f.read()
    modules = []
    for m in re.finditer(r"pkg_check_modules\(\w+ REQUIRED IMPORTED_TARGET ([^)]*)\)", text):
        modules += [w for w in m.group(1).split() if w != "cmocka"]
    return modules


class InstallDepsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.demo, cls.test = package_set("demo"), package_set("test")

    def test_the_demo_set_builds_moat(self):
        modules = build_modules()
        self.assertIn("libh2o-evloop", modules)
        for m in modules:
            pc = subprocess.run(["pkg-config", "--variable=pcfiledir", m], capture_output=True, text=True,
                                timeout=30).stdout.strip()
            self.assertTrue(pc, "pkg-config does not know %s" % m)
            self.assertIn(owner(os.path.join(pc, m + ".pc")), self.demo, "the build needs %s" % m)
        for what, path in (("wslay", "/usr/lib/x86_64-linux-gnu/cmake/wslay"), ("zlib", "/usr/include/zlib.h"),
                           ("khash (h2o_compat.c)", "/usr/include/htslib/khash.h"), ("cmake", "/usr/bin/cmake"),
                           ("cc", "/usr/bin/gcc"), ("make", "/usr/bin/make")):
            self.assertTrue(os.path.exists(path), "%s: no %s (has Debian moved it?)" % (what, path))
            pkg = owner(path)
            # gcc and make come with build-essential
            self.assertTrue(pkg in self.demo or pkg in ("gcc", "make"), "%s (%s) comes from %s, not in the demo set"
                            % (what, path, pkg))
        self.assertTrue({"build-essential", "cmake", "pkg-config"} <= self.demo)

    def test_the_demo_set_runs_the_demo(self):
        with open(os.path.join(SOURCE, "backend", "languages", "python-3.11", "manifest.json")) as f:
            self.assertIn(json.load(f)["version_package"], self.demo)  # the demo's request is python
        for tool in ("curl", "openssl", "passwd"):  # its request, its certificates, useradd
            self.assertIn(tool, self.demo)

    def test_the_demo_set_leaves_the_test_tools_out(self):
        for p in TEST_ONLY:
            self.assertNotIn(p, self.demo)
            self.assertIn(p, self.test)
        self.assertLessEqual(self.demo, self.test)

    def test_unknown_sets_and_commands_are_refused(self):
        p = subprocess.run(["sh", INSTALL_DEPS, "everything"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 2)
        self.assertEqual(p.stderr.strip(), "install-deps: unknown set 'everything' (demo or test)")
        p = subprocess.run(["bash", QUICKSTART, "bogus"], capture_output=True, text=True, timeout=30)
        self.assertEqual(p.returncode, 1)
        self.assertEqual(len(p.stderr.strip().splitlines()), 1, p.stderr)
        self.assertIn("unknown command 'bogus'", p.stderr)


if __name__ == "__main__":
    unittest.main()
