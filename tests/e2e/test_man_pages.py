"""The manual pages are there, lint clean, named by the programs, and complete.

What is checked:
  - every page (PAGES) exists, and `mandoc -T lint -W warning` says nothing
    about it (the same check as .ci/lint);
  - every program's --help names its page, e.g. "see moat-gateway(8)";
  - every program page's SEE ALSO names every other program's page, and no
    page cross-references a moat page that does not exist;
  - gateway.conf(5) names every key the configuration parser accepts, and
    names nothing else as a key.

How the keys are found.  The parser (gateway/config/config*.c) walks each YAML
mapping with a field function, `int f(struct parse_ctx *pc, const char *key,
yaml_node_t *v, void *arg)`, handed each key in turn (cfg_walk_mapping); a
function returns 1 for a key it does not know.  A field function names its
keys in one of five ways, and each has a pattern here:

  1. a comparison:        strcmp(key, "address")
  2. a cfg_slot table:    {"name", offsetof(struct tenant_seen, name)}   (cfg_note)
  3. a cfg_uint_spec table, through CFG_UINT_SPEC(type, field, ...) or a
     local wrapper macro (#define FIELD(field, ...) CFG_UINT_SPEC(...)):
                          FIELD(ttl_s, 1, GW_MAX_JUDGE0_TTL_S)  -> "ttl_s"
                          (CFG_UINT_SPEC stringizes the field: #field)
  4. a table of sections and their field functions (config_server.c):
                          {"listen", listen_field}
  5. the audit writer's settings, gw_audit_tuning_specs (config_audit.c):
                          {"checkpoint_records", "--checkpoint-records", 1, ...}

C comments are removed first, so an example in a comment counts for
nothing.  Two checks keep the extraction honest, so that a key added in a
new way fails here instead of passing unseen:
  - every `strcmp(key, X)` in the parser compares with a string literal, or
    is one of the table lookups above (specs[i].key, slots[i].key, sp->key,
    sections[i].key);
  - every field function yields at least one key by these patterns, or
    looks its keys up in a table (sections[], gw_audit_tuning_specs) that
    does.
config_store.c is left out: it reads the admin store (moat-store.json), not
gateway.conf, and its keys (version, state, created, ...) are the store's.

How the page is read.  gateway.conf.5 marks every key, and only keys, with
the mdoc macro Ic (".It Ic timeout_ms Ar integer", "Ic listen . Ns Ic port").
The words after each Ic are the keys the page documents.  The check is by
name: "timeout_ms" documented once covers backend.timeout_ms and
limiter.redis.timeout_ms alike.
"""

import glob
import os
import re
import shutil
import subprocess
import unittest

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("MOAT_BUILD_DIR", os.path.join(SOURCE, "build"))

# page -> the program that names it in --help (None: a file format or protocol)
PAGES = {
    "gateway/man/moat-gateway.8": os.path.join(BUILD, "gateway", "moat-gateway"),
    "gateway/man/moatctl.8": os.path.join(BUILD, "gateway", "moatctl"),
    "gateway/man/gateway.conf.5": None,
    "gateway/man/moat-api.7": None,
    "backend/man/moat-backend.8": os.path.join(BUILD, "backend", "moat-backend"),
    "backend/man/moat-languages.5": None,
    "backend/man/moat-protocol.7": None,
    "audit/man/moat-audit.1": os.path.join(BUILD, "audit", "moat-audit"),
    "audit/man/moat-audit-writer.8": os.path.join(BUILD, "audit", "moat-audit-writer"),
}

CONFIG_PAGE = os.path.join(SOURCE, "gateway", "man", "gateway.conf.5")
PARSER_SKIP = {"config_store.c"}  # the admin store's reader, not gateway.conf's

FIELD_FN = re.compile(
    r"^(?:static\s+)?int\s+(\w+)\s*\(\s*struct\s+parse_ctx\s*\*\s*\w+\s*,\s*const\s+char\s*\*\s*key\s*,"
    r"\s*yaml_node_t\s*\*\s*\w+\s*,\s*void\s*\*\s*\w+\s*\)\s*\{", re.M)
KEY = r"([a-z][a-z0-9_]*)"
STRCMP_LITERAL = re.compile(r'strcmp\(\s*key\s*,\s*"' + KEY + r'"\s*\)')
STRCMP_ANY = re.compile(r"strcmp\(\s*key\s*,\s*([^)]*)\)")
STRCMP_TABLE_LOOKUPS = {"specs[i].key", "slots[i].key", "sp->key", "sections[i].key"}
SLOT = re.compile(r'\{\s*"' + KEY + r'"\s*,\s*offsetof\s*\(')
SECTION = re.compile(r'\{\s*"' + KEY + r'"\s*,\s*\w+_field\s*\}')
UINT_WRAPPER = re.compile(r"^\s*#\s*define\s+(\w+)\s*\([^)]*\)\s*CFG_UINT_SPEC\s*\(", re.M)
TUNING = re.compile(r'\{\s*"' + KEY + r'"\s*,\s*"--[a-z0-9-]+"')


C_TOKENS = re.compile(r'("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')|/\*.*?\*/|//[^\n]*', re.S)


def strip_comments(text):
    """C source without its comments; string and character literals are kept whole."""
    return C_TOKENS.sub(lambda m: m.group(1) if m.group(1) is not None else " ", text)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def uint_spec_keys(text):
    """Keys of cfg_uint_spec tables: CFG_UINT_SPEC(type, field, ...) and every local wrapper's first argument."""
    keys = set()
    code = "\n".join(line for line in text.splitlines() if not re.match(r"\s*#\s*define\b", line))
    keys |= set(re.findall(r"\bCFG_UINT_SPEC\s*\(\s*[^,]+,\s*" + KEY + r"\s*,", code))
    for wrapper in set(UINT_WRAPPER.findall(text)):
        keys |= set(re.findall(r"\b" + re.escape(wrapper) + r"\s*\(\s*" + KEY + r"\s*,", code))
    return keys


def keys_in(text):
    return (set(STRCMP_LITERAL.findall(text)) | set(SLOT.findall(text)) | set(SECTION.findall(text))
            | uint_spec_keys(text))


def field_functions(text):
    """(name, body) of every cfg_field_fn defined in text."""
    out = []
    for m in FIELD_FN.finditer(text):
        end = re.compile(r"^\}", re.M).search(text, m.end())
        out.append((m.group(1), text[m.end():end.start() if end else len(text)]))
    return out


def tuning_keys():
    """The audit section's writer settings: gw_audit_tuning_specs' initializer, wherever it is defined."""
    keys = set()
    for path in glob.glob(os.path.join(SOURCE, "gateway", "**", "*.c"), recursive=True):
        text = strip_comments(read(path))
        m = re.search(r"gw_audit_tuning_specs\s*\[[^\]]*\]\s*=\s*\{(.*?)\n\};", text, re.S)
        if m:
            keys |= set(TUNING.findall(m.group(1)))
    return keys


def parser_keys():
    """Every key gateway.conf may hold, by name, and the problems found on the way (see the docstring)."""
    sources = sorted(p for p in glob.glob(os.path.join(SOURCE, "gateway", "config", "config*.c"))
                     if os.path.basename(p) not in PARSER_SKIP)
    keys, problems = set(), []
    tuning = tuning_keys()
    if not tuning:
        problems.append("gw_audit_tuning_specs: no settings found")
    texts = {os.path.basename(p): strip_comments(read(p)) for p in sources}
    for name, text in texts.items():
        keys |= keys_in(text)
        for arg in STRCMP_ANY.findall(text):
            arg = arg.strip()
            if not re.fullmatch(r'"' + KEY + r'"', arg) and arg not in STRCMP_TABLE_LOOKUPS:
                problems.append("%s: strcmp(key, %s): not a string literal nor a known table lookup" % (name, arg))
        for fn, body in field_functions(text):
            found = keys_in(body)
            if "gw_audit_tuning_specs" in body:
                found |= tuning
            if "sections[" in body:
                found |= set(SECTION.findall(text))
            if not found:
                problems.append("%s: field function %s names no key this test can read" % (name, fn))
    keys |= tuning
    return keys, problems, len(texts)


def documented_keys(page_text):
    """The words that follow the macro Ic on the page's macro lines."""
    keys = set()
    for line in page_text.splitlines():
        if not line.startswith("."):
            continue
        words = line[1:].split()
        for i, w in enumerate(words[:-1]):
            if w == "Ic":
                keys.add(words[i + 1])
    return keys


def see_also(page_text):
    """(name, section) of every Xr in the page's SEE ALSO section."""
    m = re.search(r"^\.Sh SEE ALSO\n(.*?)(?=^\.Sh |\Z)", page_text, re.M | re.S)
    return set(re.findall(r"^\.Xr (\S+) (\d)", m.group(1), re.M)) if m else set()


def page_name(path):
    base = os.path.basename(path)
    name, section = base.rsplit(".", 1)
    return name, section


class ManPagesTest(unittest.TestCase):
    def test_pages_exist_and_lint_clean(self):
        mandoc = shutil.which("mandoc")
        self.assertIsNotNone(mandoc, "mandoc is not installed (.ci/install-deps test installs it)")
        for page in PAGES:
            path = os.path.join(SOURCE, page)
            with self.subTest(page=page):
                self.assertTrue(os.path.isfile(path), "%s is missing" % page)
                p = subprocess.run([mandoc, "-T", "lint", "-W", "warning", path], capture_output=True, text=True,
                                   timeout=60)
                self.assertEqual(p.stdout + p.stderr, "", "mandoc -T lint -W warning %s" % page)

    def test_every_man_page_is_listed(self):
        found = {os.path.relpath(p, SOURCE) for p in glob.glob(os.path.join(SOURCE, "*", "man", "*.[1-8]"))}
        self.assertEqual(found, set(PAGES), "pages on disk and PAGES differ")

    def test_help_names_the_page(self):
        for page, program in PAGES.items():
            if program is None:
                continue
            name, section = page_name(page)
            with self.subTest(program=program):
                self.assertTrue(os.access(program, os.X_OK), "%s is not built" % program)
                p = subprocess.run([program, "--help"], capture_output=True, text=True, timeout=60)
                self.assertEqual(p.returncode, 0, "%s --help: exit %d: %s" % (program, p.returncode, p.stderr))
                self.assertIn("%s(%s)" % (name, section), p.stdout, "%s --help does not name its page" % program)

    def test_cross_references(self):
        pages = {page_name(p) for p in PAGES}
        programs = {page_name(p) for p, prog in PAGES.items() if prog is not None}
        for page in PAGES:
            text = read(os.path.join(SOURCE, page))
            me = page_name(page)
            refs = set(re.findall(r"^\.Xr (\S+) (\d)", text, re.M))
            with self.subTest(page=page):
                for name, section in refs:
                    if name.startswith("moat") or name == "gateway.conf":
                        self.assertIn((name, section), pages, "%s refers to %s(%s), which is no page" %
                                      (page, name, section))
                if me in programs:
                    missing = programs - {me} - see_also(text)
                    self.assertFalse(missing, "%s: SEE ALSO lacks %s" % (page, sorted(missing)))

    def test_moat_gateway_lists_every_error_code(self):
        """moat-gateway(8)'s "Error codes" list is audit_reason.c's two tables (the codes status and
        reason choose, and the ones a step names), both ways, with their statuses; and no gateway
        source writes a code of its own outside them."""
        source = read(os.path.join(SOURCE, "gateway", "records", "audit_reason.c"))
        mapped = set(re.findall(r'\{(\d{3}), GW_REASON_\w+, "([a-z_]+)"\}', source))
        named = set(re.findall(r'\[GW_CODE_\w+\] = \{(\d{3}), "([a-z_]+)"\}', source))
        self.assertTrue(mapped and named, "the tables of audit_reason.c were not found")
        page = read(os.path.join(SOURCE, "gateway", "man", "moat-gateway.8"))
        section = page[page.index(".Ss Error codes"):]
        section = section[:section.index(".El")]
        listed = set(re.findall(r"^\.It (\d{3}) Ta Li ([a-z_]+) Ta", section, re.M))
        self.assertEqual(listed - (mapped | named), set(), "listed in moat-gateway(8), in no table")
        self.assertEqual((mapped | named) - listed, set(), "in audit_reason.c, not listed in moat-gateway(8)")
        stray = []
        for path in glob.glob(os.path.join(SOURCE, "gateway", "**", "*.c"), recursive=True):
            if path.endswith(os.path.join("records", "audit_reason.c")):
                continue
            for n, line in enumerate(read(path).splitlines(), 1):
                if re.search(r'\bcode = "', line):
                    stray.append("%s:%d: %s" % (os.path.relpath(path, SOURCE), n, line.strip()))
        self.assertEqual(stray, [], "a code written outside audit_reason.c's tables (gw_code)")

    def test_gateway_conf_names_every_parser_key(self):
        keys, problems, nfiles = parser_keys()
        self.assertFalse(problems, "the key extraction does not cover the parser:\n  " + "\n  ".join(problems))
        # a floor, so that an extraction broken by a change of style cannot pass with few keys
        self.assertGreater(nfiles, 10)
        self.assertGreater(len(keys), 130, "only %d keys found in the parser" % len(keys))
        for k in ("tls", "certificate", "checkpoint_delay_ms", "run_stack_kib", "sentinels", "max_watchers",
                  "leeway_s", "allow_private", "per_second", "listen", "queue_max_bytes_per_tenant"):
            self.assertIn(k, keys, "the extraction misses %s" % k)
        documented = documented_keys(read(CONFIG_PAGE))
        self.assertFalse(sorted(keys - documented),
                         "gateway.conf(5) does not document these parser keys: %s" % sorted(keys - documented))
        self.assertFalse(sorted(documented - keys),
                         "gateway.conf(5) marks with Ic words the parser does not know: %s" % sorted(documented - keys))


if __name__ == "__main__":
    unittest.main()
