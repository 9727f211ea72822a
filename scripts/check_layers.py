#!/usr/bin/env python3
"""Check that libgoblin's folders form layers: each uses only itself and those below.

    python3 scripts/check_layers.py                 # includes only
    python3 scripts/check_layers.py --objects DIR   # and calls: nm over DIR's objects
    python3 scripts/check_layers.py --largest 10    # also print the largest source files
    python3 scripts/check_layers.py --doc docs/architecture.md   # the doc names everything

Includes: every `#include "..."` in libgoblin/ resolves to a file of libgoblin/
(same folder, or a path from libgoblin/) and must name a folder at or below the
including file's. Calls: with --objects (a build's libgoblin objects), every
symbol an object uses from another object must come from a folder at or below its
own. With --doc, the page must name every public header, every libgoblin folder
and every libgoblin source file. Exits 1 with one line per violation. CONTRIBUTING.md explains the rule.
"""
import argparse
import os
import re
import subprocess
import sys

# Lowest first. Siblings in a row of this list may not use each other.
LAYERS = [
    ['base'],
    ['kernels'],
    ['core'],
    ['ops'],
    ['graph'],
    ['backends'],
    ['backends/ref'],
    ['backends/blis', 'backends/cuda'],
    ['exec'],
    ['verify', 'io', 'proto'],
    ['net'],
    ['node'],
    ['worker'],
    ['service'],
    ['hub'],
    ['grid'],
    ['train'],
]
RANK = {f: i for i, row in enumerate(LAYERS) for f in row}
SRC = re.compile(r'\.(c|h|cu)$')
INC = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(rel):
    return os.path.dirname(rel)


def may_use(src, dst):
    return src == dst or RANK[dst] < RANK[src]


def check_includes(lib):
    bad, seen = [], set()
    for root, _, files in os.walk(lib):
        for f in files:
            if not SRC.search(f):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, lib)
            src = folder_of(rel)
            if src not in RANK:
                bad.append(f'{rel}: folder {src or "(top)"} is not in the layer list')
                continue
            seen.add(src)
            with open(path, encoding='utf-8', errors='replace') as fh:
                text = fh.read()
            for inc in INC.findall(text):
                if inc.startswith('goblin/'):
                    continue
                here = os.path.normpath(os.path.join(root, inc))
                top = os.path.normpath(os.path.join(lib, inc))
                if os.path.isfile(here) and '/' not in inc:
                    target = os.path.relpath(here, lib)
                elif os.path.isfile(top):
                    target = os.path.relpath(top, lib)
                elif os.path.isfile(here):
                    bad.append(f'{rel}: includes "{inc}" by a relative path; name it from libgoblin/')
                    continue
                else:
                    continue  # a system or generated header
                dst = folder_of(target)
                if dst not in RANK:
                    bad.append(f'{rel}: includes {target}, whose folder is not in the layer list')
                elif not may_use(src, dst):
                    bad.append(f'{rel}: includes {target} ({dst} is above {src})')
    return bad, seen


def object_folder(obj, lib_rel_dirs):
    """meson names objects after the source path with '/' as '_': find the folder."""
    base = os.path.basename(obj)
    for d in sorted(lib_rel_dirs, key=len, reverse=True):
        if base.startswith(d.replace('/', '_') + '_'):
            return d
    if '/backends/cuda/' in obj:
        return 'backends/cuda'
    return None


def check_calls(objdir, folders):
    objs = []
    for root, _, files in os.walk(objdir):
        objs += [os.path.join(root, f) for f in files if f.endswith('.o')]
    defs, uses, where = {}, {}, {}
    for o in objs:
        folder = object_folder(o, folders)
        if folder is None:
            continue
        where[o] = folder
        out = subprocess.run(['nm', '-P', o], capture_output=True, text=True).stdout
        uses[o] = set()
        for line in out.splitlines():
            p = line.split()
            if len(p) < 2:
                continue
            if p[1] == 'U':
                uses[o].add(p[0])
            elif p[1] in 'TDBRVW':
                defs.setdefault(p[0], o)
    bad = set()
    for o, syms in uses.items():
        for s in syms:
            d = defs.get(s)
            if d and d != o and not may_use(where[o], where[d]):
                bad.add(f'{os.path.basename(o)} ({where[o]}) calls {s} of {os.path.basename(d)} '
                        f'({where[d]}, above it)')
    return sorted(bad), len(where)


def check_doc(doc, top, lib, folders):
    with open(doc, encoding='utf-8') as fh:
        text = fh.read()
    words = set(re.findall(r'[A-Za-z0-9_./-]+', text))
    names = set()
    for w in words:
        names.add(w.rstrip('/.,:;'))
        names.update(part for part in re.split(r'[/]', w) if part)
    bad = []
    for h in sorted(os.listdir(os.path.join(top, 'include', 'goblin'))):
        if h.endswith('.h') and h not in names:
            bad.append(f'{doc}: does not name the public header {h}')
    for f in sorted(folders):
        if f + '/' not in text and f not in names:
            bad.append(f'{doc}: does not name the folder {f}/')
    for root, _, files in os.walk(lib):
        for f in files:
            if SRC.search(f) and f not in names:
                bad.append(f'{doc}: does not name {os.path.relpath(os.path.join(root, f), top)}')
    return bad


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--objects', help='a directory of libgoblin object files (a build dir)')
    ap.add_argument('--doc', help='a page that must name every header, folder and source')
    ap.add_argument('--largest', type=int, default=0, help='print the N largest sources')
    args = ap.parse_args()
    top = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lib = os.path.join(top, 'libgoblin')
    bad, seen = check_includes(lib)
    n_obj = 0
    if args.objects:
        calls, n_obj = check_calls(args.objects, seen)
        bad += calls
    if args.doc:
        bad += check_doc(args.doc, top, lib, seen)
    if args.largest:
        sizes = []
        for root, _, files in os.walk(lib):
            for f in files:
                if SRC.search(f):
                    p = os.path.join(root, f)
                    with open(p, encoding='utf-8', errors='replace') as fh:
                        sizes.append((sum(1 for _ in fh), os.path.relpath(p, top)))
        for n, p in sorted(sizes, reverse=True)[:args.largest]:
            print(f'{n:6d} {p}')
    for b in bad:
        print(b)
    what = f'{len(seen)} folders' + (f', {n_obj} objects' if args.objects else '')
    print(f'layers: {what}, {len(bad)} violation(s)')
    if args.objects and n_obj == 0:
        print('layers: no objects found under ' + args.objects)
        return 1
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
