#!/usr/bin/env python3
"""check-tree.py: the tree keeps the rules README.md's "Architecture" states (ctest `tree`, CI).

- format: every C and C++ file is as .clang-format says (clang-format --dry-run --Werror);
- boundary: tools/, bench/, fuzz/ and plugin/ include include/hbmalloc.h, src/util/util.h and their own headers
  (bench/ and fuzz/ also the tool's), nothing else of src/ (tests/ reach src/ through their declared header,
  tests/unit/helpers.h);
- layers: the includes and cross-file calls of src/ and tools/ make no circle spanning more than one module folder
  (src/core, src/policy, src/backend, src/conf, src/io, src/util, src/ itself; tools/trace, tools/run, ...);
- rooms: inside a folder of src/, tools/ or plugin/, the files (a .c and its .h are one) call each other in no circle but the ones ROOM_CIRCLES
  names, each argued in docs/DESIGN.md;
- cites: every path of the repository a comment or a document names exists (src/ and tools/ paths also as the
  sources write them, core/engine.c), and every section cited by a
  document's name and a quoted title is a heading (or a paragraph's bold lead) of that document.

usage: scripts/check-tree.py [CHECK...]   (all five by default); exit status 1 when any fails, each failure said.
"""
import os
import re
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.chdir(ROOT)

TEXT = ('.md', '.c', '.h', '.cpp', '.py', '.sh', '.txt', '.html', '.toml', '.in', '.cmake', '.inc')
# Paths cited that are not files of the repository, on purpose: what a build or a run makes, or another project's.
NOT_OURS = {
    'fuzz/findings': 'made by scripts/fuzz.sh when a target fails (git-ignored)',
    'tests/browser': "the build's folder of the browser test's screenshots",
    'src/acl/aclrt_impl': "CANN's sources, not ours",
}


def tracked():
    try:
        return subprocess.check_output(['git', 'ls-files'], stderr=subprocess.DEVNULL).decode().split('\n')
    except (OSError, subprocess.CalledProcessError):  # a copy of the tree without .git
        out = []
        for d, dirs, files in os.walk('.'):
            dirs[:] = [x for x in dirs if not x.startswith(('.', 'build')) and x != '__pycache__']
            out += [os.path.relpath(os.path.join(d, f)) for f in files]
        return out


FILES = [f for f in tracked() if f and os.path.isfile(f)]


def read(f):
    with open(f, encoding='utf-8', errors='replace') as fp:
        return fp.read()


def check_format():
    cf = shutil.which('clang-format')
    if not cf:
        return ['clang-format is not installed (scripts/deps.sh test installs it)']
    src = [f for f in FILES if f.endswith(('.c', '.h', '.cpp'))]
    r = subprocess.run([cf, '--dry-run', '--Werror'] + src, capture_output=True, text=True)
    bad = sorted({line.split(':')[0] for line in r.stderr.splitlines() if 'clang-format-violations' in line})
    return ['%s: not as .clang-format says (clang-format -i %s)' % (f, f) for f in bad]


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def check_boundary():
    bad = []
    for f in FILES:
        if not f.endswith(('.c', '.h', '.cpp')) or not f.startswith(('tools/', 'bench/', 'fuzz/', 'plugin/')):
            continue
        top = f.split('/')[0]
        for inc in INCLUDE.findall(read(f)):
            if inc in ('hbmalloc.h', 'util.h'):
                continue
            if top in ('bench', 'fuzz') and os.path.exists(os.path.join('tools', inc)):
                continue  # the tool's own headers (its readers, its replay): what the benchmarks and fuzzers drive
            here = os.path.normpath(os.path.join(os.path.dirname(f), inc))
            ours = os.path.normpath(os.path.join(top, inc))  # tools/ and bench/ name tools' headers from tools/
            if (os.path.exists(here) and here.startswith(top + '/')) or \
               (os.path.exists(ours) and ours.startswith(top + '/')):
                continue
            bad.append('%s includes "%s": outside its own tree, only hbmalloc.h and util.h' % (f, inc))
    return bad


def module_of(f):
    parts = f.split('/')
    if parts[0] in ('src', 'tools') and len(parts) > 2:
        return parts[0] + '/' + parts[1]
    return parts[0] if parts[0] in ('src', 'tools') else None


DEF = re.compile(r'^(?!static\b)(?:[A-Za-z_][\w \*]*?[\s\*])?(hbm_\w+|hbm__\w+|[a-z]\w*)\s*\([^;{]*\)\s*\{', re.M)
CALL = re.compile(r'\b([A-Za-z_]\w*)\s*\(')
PROTOTYPE = re.compile(r'^[A-Za-z_][\w \*]*\b\w+\s*\([^;{}]*\)\s*(?:__attribute__\s*\(\([^;]*\)\))?\s*;', re.M)
COMMENT = re.compile(r'/\*.*?\*/|//[^\n]*|"(?:\\.|[^"\\\n])*"', re.S)


# The circles of calls inside a folder that stay, each argued in docs/DESIGN.md, "The knot": a new one fails.
ROOM_CIRCLES = {
    'src/core': [{'engine', 'expandable', 'mempools', 'region', 'sleep'}],
}
INLINE_DEF = re.compile(r'^static\s+inline\b[^;{(]*?\b(\w+)\s*\([^;{]*\)\s*\{', re.M)


def sccs(edges):
    """The strongly connected components of a graph {node: {node: why}} of more than one node (Tarjan)."""
    index, low, stack, on, comps, n = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = n[0]
        n[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            comps.append(comp)

    for v in sorted(set(edges) | {t for e in edges.values() for t in e}):
        if v not in index:
            visit(v)
    return [c for c in comps if len(c) > 1]


def check_layers():
    code = {f: PROTOTYPE.sub(' ', COMMENT.sub(' ', read(f))) for f in FILES  # declarations are not calls
            if f.endswith(('.c', '.h')) and f.startswith(('src/', 'tools/'))}
    defined = {}
    for f, s in code.items():
        if f.endswith('.c'):
            for name in DEF.findall(s):
                defined.setdefault(name, f)
    edges = {}  # module -> modules it uses (includes or calls)
    for f, s in code.items():
        m = module_of(f)
        for inc in INCLUDE.findall(read(f)):
            for cand in (os.path.join(os.path.dirname(f), inc), os.path.join('src', inc), os.path.join('tools', inc),
                         os.path.join('src/util', inc)):
                if os.path.exists(cand):
                    t = module_of(os.path.normpath(cand))
                    if t and t != m:
                        edges.setdefault(m, {}).setdefault(t, 'includes ' + inc + ' (' + f + ')')
                    break
        for name in set(CALL.findall(s)):
            g = defined.get(name)
            t = module_of(g) if g else None
            if t and t != m and g != f:
                edges.setdefault(m, {}).setdefault(t, 'calls ' + name + ' (' + f + ' -> ' + g + ')')
    bad = []
    for comp in sccs(edges):
        why = ['%s -> %s: %s' % (a, b, edges[a][b]) for a in sorted(comp) for b in sorted(edges.get(a, {})) if b in comp]
        bad.append('a circle spans %s:\n    %s' % (', '.join(sorted(comp)), '\n    '.join(why)))
    return bad


PATH = re.compile(r'(?<![\w./:$-])((?:src|tools|tests|docs|bench|scripts|examples|include|plugin|python|fuzz|cmake|monitor|'
                  r'\.ci)/[\w./*-]*[\w/*])')
# A path as the sources name one another: relative to src/ or tools/ (core/engine.c, backend/backend.h, trace/trace.h).
SRC_PATH = re.compile(r'(?<![\w./:$-])((?:core|backend|policy|io|conf|util|trace|run|view|doctor)/[\w-]+\.(?:c|h|cpp))\b')
SECTION = re.compile(r'(?<![\w.-])((?:\.\./shared/|docs/)?([A-Z][A-Z_]+\.md))[,:]? ["“]([^"”\n]{2,80})["”]')


def sections(md, cache={}):
    if md not in cache:
        try:
            cache[md] = [re.sub(r'^#+\s*|^\*\*|\*\*.*$', '', line).strip().lower() for line in read(md).splitlines()
                         if line.startswith(('#', '**'))]
        except OSError:
            cache[md] = None
    return cache[md]


def check_cites():
    bad = []
    for f in FILES:
        if not (f.endswith(TEXT) or os.path.basename(f) in ('Makefile', 'run')):
            continue
        if f.startswith(('tests/data/', 'fuzz/corpus/')):
            continue
        s = read(f)
        for m in PATH.finditer(s):
            p = m.group(1).rstrip('.').rstrip('/')
            if '*' in p or p.startswith('build') or p in NOT_OURS or any(p.startswith(k + '/') for k in NOT_OURS):
                continue
            if not os.path.exists(p) and not os.path.exists(p.rstrip('-')):
                bad.append('%s:%d: cites %s, which does not exist' % (f, s.count('\n', 0, m.start()) + 1, p))
        for m in SRC_PATH.finditer(s):
            p = m.group(1)
            if not any(os.path.exists(os.path.join(d, p)) for d in ('src', 'tools', os.path.dirname(f))):
                bad.append('%s:%d: cites %s, which is in neither src/ nor tools/' % (f, s.count('\n', 0, m.start()) + 1,
                                                                                       p))
        for m in SECTION.finditer(s):
            path, name, title = m.groups()
            if path.startswith('../shared/'):
                continue  # the shared notes are not part of this repository
            md = 'docs/' + name if os.path.exists('docs/' + name) else name
            heads = sections(md)
            where = '%s:%d' % (f, s.count('\n', 0, m.start()) + 1)
            if heads is None:
                bad.append('%s: cites %s, which does not exist' % (where, md))
            elif not any(title.lower() in h for h in heads):
                bad.append('%s: cites %s, "%s": no such section' % (where, md, title))
    return bad


def check_rooms():
    """Calls between the files of one folder: a function defined in a .c, or static inline in a .h, belongs to its
    file's stem; a call from another stem of the same folder is an edge."""
    code = {f: COMMENT.sub(' ', read(f)) for f in FILES
            if f.endswith(('.c', '.h')) and f.startswith(('src/', 'tools/', 'plugin/'))}
    stem = lambda f: os.path.splitext(f)[0]
    owner = {}
    for f, s in code.items():
        names = (DEF.findall(PROTOTYPE.sub(' ', s)) if f.endswith('.c') else []) + INLINE_DEF.findall(s)
        for name in names:
            if not name.startswith('__'):
                owner.setdefault(name, stem(f))
    edges = {}
    for f, s in code.items():
        u = stem(f)
        for name in set(CALL.findall(PROTOTYPE.sub(' ', s))):
            t = owner.get(name)
            if t and t != u and os.path.dirname(t) == os.path.dirname(u):
                edges.setdefault(u, {}).setdefault(t, name)
    bad = []
    for comp in sccs(edges):
        if {os.path.basename(c) for c in comp} in ROOM_CIRCLES.get(os.path.dirname(comp[0]), []):
            continue
        why = ['%s -> %s: calls %s' % (a, b, edges[a][b]) for a in sorted(comp) for b in sorted(edges.get(a, {}))
               if b in comp]
        bad.append('a circle of calls inside %s: %s (untie it, or name and argue it in docs/DESIGN.md and '
                   'ROOM_CIRCLES):\n    %s' % (os.path.dirname(comp[0]), ', '.join(sorted(comp)), '\n    '.join(why)))
    return bad


CHECKS = {'format': check_format, 'boundary': check_boundary, 'layers': check_layers, 'rooms': check_rooms,
          'cites': check_cites}


def main():
    names = sys.argv[1:] or list(CHECKS)
    failed = 0
    for name in names:
        problems = CHECKS[name]()
        for p in problems:
            print('%s: %s' % (name, p))
        print('%s: %s' % (name, 'ok' if not problems else '%d problem%s' % (len(problems), 's' * (len(problems) > 1))))
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
