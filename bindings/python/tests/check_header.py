#!/usr/bin/python3
"""Checks the Python package's copy of the C API against include/dlock.h.

    check_header.py --cc CC --header DLOCK_H [-I DIR ...] [--mutants]

The package declares by hand what it uses of dlock.h (dlock/_native.py:
four structs, the prototypes, the callbacks' shapes, the constants;
dlock/_errors.py: the status codes). Nothing in ctypes checks any of it:
a field the header gains before the last one, two fields swapped or a
status renumbered would be read and written wrongly without a word. This
script fails, naming what drifted, when:

- a mirrored struct's fields are not the header's, in its order (a field
  added anywhere, even into the trailing padding, or renamed, or moved);
- a field's offset, size or signedness differs from what the compiler
  says (offsetof, sizeof in a small C program built from the header and
  the mirror);
- a struct's size differs;
- a status code, an enum value or a #define the package uses has another
  value in C (the same program prints them), or the header has a status
  code the package has no exception for;
- a function the package calls, or one of the library's queue callbacks
  it passes, is not declared in the header, is not exported by the
  library, or takes other arguments (count, and each one's size,
  signedness and kind: integer, string, pointer to what, callback of what
  shape) or returns another type.

Prototypes are read from the header run through the C preprocessor (no
comments, macros expanded), so only its own declarations are parsed.

--mutants runs the check against mutated copies of the header in a
temporary directory, each of which must fail it: a field added to
dlock_options before its last one, one appended into its padding, two
adjacent fields of the same type swapped, a status code renumbered, an
enum value changed, a status code added, a parameter added to a
function. It proves that the
check has teeth.

Needs the library (DLOCK_LIBRARY) and the package (PYTHONPATH), as the
pytest suites do.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from typing import Any, Callable, Dict, List, Optional, Tuple

from dlock import _errors, _native

# ---------------------------------------------------------------------------
# Types, in one canonical form for both sides:
#   ("int", size, signed)  signed None: an enum (either signedness is fine)
#   ("char",)  ("void",)  ("str",) a char pointer  ("handle",) any other
#   object pointer  ("ptr", T)  ("array", T, n)  ("struct", c_name)
#   ("fn", return type, (parameter types...))

Type = Tuple[Any, ...]

_STRUCT_NAMES = {cls: name for name, cls in _native.STRUCTS.items()}


def show(t: Type) -> str:
    """A canonical type as a person reads it."""
    k = t[0]
    if k == "int":
        return ("enum" if t[2] is None else "%sint%d" % ("" if t[2] else "u", 8 * t[1]))
    if k in ("char", "void", "str", "handle"):
        return {"char": "char", "void": "void", "str": "char *", "handle": "pointer to an object"}[k]
    if k == "ptr":
        return "pointer to " + show(t[1])
    if k == "array":
        return "%s[%d]" % (show(t[1]), t[2])
    if k == "struct":
        return "struct " + t[1]
    return "callback %s(%s)" % (show(t[1]), ", ".join(show(p) for p in t[2]))


def same(c: Type, py: Type) -> bool:
    """Does the mirror's type `py` pass what C's type `c` is?"""
    if c[0] == "int" and py[0] == "int":
        return c[1] == py[1] and (c[2] is None or c[2] == py[2])
    if c[0] != py[0] or len(c) != len(py):
        return False
    if c[0] in ("ptr",):
        return same(c[1], py[1])
    if c[0] == "array":
        return c[2] == py[2] and same(c[1], py[1])
    if c[0] == "fn":
        return (same(c[1], py[1]) and len(c[2]) == len(py[2])
                and all(same(a, b) for a, b in zip(c[2], py[2])))
    return c == py


def py_type(t: Any) -> Type:
    """The canonical form of a ctypes type of the mirror."""
    if t is None:
        return ("void",)
    if t is ctypes.c_char_p:
        return ("str",)
    if t is ctypes.c_void_p:
        return ("handle",)
    if t is ctypes.c_char:
        return ("char",)
    if t in _STRUCT_NAMES:
        return ("struct", _STRUCT_NAMES[t])
    if isinstance(t, type) and issubclass(t, ctypes.Array):
        return ("array", py_type(t._type_), t._length_)
    if isinstance(t, type) and issubclass(t, ctypes._Pointer):  # type: ignore[attr-defined]
        inner = py_type(t._type_)
        return ("ptr", inner)
    if isinstance(t, type) and issubclass(t, ctypes._CFuncPtr):  # type: ignore[attr-defined]
        return ("fn", py_type(t._restype_), tuple(py_type(a) for a in t._argtypes_))
    code = getattr(t, "_type_", None)
    if isinstance(code, str) and code in "bBhHiIlLqQ":
        return ("int", ctypes.sizeof(t), code.islower())
    raise SystemExit("check_header: the mirror uses a ctypes type this check does not know: %r" % (t,))


# ---------------------------------------------------------------------------
# The header, as the preprocessor leaves it.

# The compiler and the C program run without the sanitizer preload meant
# for python (ctest sets it in a DLOCK_SANITIZE build).
_ENV = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}

def preprocess(cc: str, header: str, includes: List[str]) -> str:
    """dlock.h's own lines after the preprocessor (no comments, macros
    expanded, what it includes left out)."""
    args = [cc, "-E", "-std=c11"] + ["-I" + d for d in includes] + [header]
    p = subprocess.run(args, capture_output=True, text=True, env=_ENV)
    if p.returncode:
        raise SystemExit("check_header: the preprocessor failed on %s:\n%s" % (header, p.stderr))
    out, keep = [], False
    base = os.path.basename(header)
    for line in p.stdout.splitlines():
        m = re.match(r'# \d+ "(.*)"', line)
        if m:
            keep = os.path.basename(m.group(1)) == base
            continue
        if keep:
            out.append(line)
    return "\n".join(out)


def _strip_attributes(text: str) -> str:
    """Drop every __attribute__((...)), parentheses balanced."""
    out = []
    i = 0
    while True:
        j = text.find("__attribute__", i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        out.append(text[i:j])
        k = text.index("(", j)
        depth = 0
        while True:
            if text[k] == "(":
                depth += 1
            elif text[k] == ")":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        i = k + 1


def statements(text: str) -> List[str]:
    """Top-level declarations: split at ';' outside braces; a function
    defined in the header (static inline) ends at its closing brace."""
    text = _strip_attributes(text)
    out, cur, depth = [], [], 0
    for ch in text:
        cur.append(ch)
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                s = "".join(cur)
                if s[:s.index("{")].rstrip().endswith(")"):
                    out.append(s.strip())
                    cur = []
        elif ch == ";" and depth == 0:
            out.append("".join(cur)[:-1].strip())
            cur = []
    rest = "".join(cur).strip()
    if rest:
        raise SystemExit("check_header: dlock.h ends inside a declaration: %r" % rest[:200])
    return [" ".join(s.split()) for s in out if s.strip()]


def _split_top(s: str, sep: str = ",") -> List[str]:
    """Split at `sep` outside parentheses and brackets."""
    parts, cur, depth = [], [], 0
    for ch in s:
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    last = "".join(cur).strip()
    if last:
        parts.append(last)
    return parts


_WORDS = {"int", "long", "short", "char", "void", "unsigned", "signed", "double", "float",
          "const", "volatile", "struct", "enum", "restrict", "_Bool"}
_INTS = {
    "int": (4, True), "signed": (4, True), "signed int": (4, True), "unsigned": (4, False),
    "unsigned int": (4, False), "long": (8, True), "long int": (8, True),
    "unsigned long": (8, False), "long long": (8, True), "unsigned long long": (8, False),
    "short": (2, True), "unsigned short": (2, False),
    "int8_t": (1, True), "uint8_t": (1, False), "int16_t": (2, True), "uint16_t": (2, False),
    "int32_t": (4, True), "uint32_t": (4, False), "int64_t": (8, True), "uint64_t": (8, False),
    "size_t": (8, False), "ssize_t": (8, True), "_Bool": (1, False),
}
# long and size_t follow the platform's C ABI (ctypes knows it).
_INTS["long"] = _INTS["long int"] = (ctypes.sizeof(ctypes.c_long), True)
_INTS["unsigned long"] = (ctypes.sizeof(ctypes.c_ulong), False)
_INTS["size_t"] = (ctypes.sizeof(ctypes.c_size_t), False)


class Header:
    """What dlock.h declares: structs (fields in order), enums
    (enumerator names in order), callback typedefs, opaque types and
    functions (return and parameter types)."""

    def __init__(self, text: str) -> None:
        self.structs: Dict[str, List[Tuple[str, str]]] = {}
        self.enums: Dict[str, List[str]] = {}
        self.enum_types: set = set()
        self.opaque: set = set()
        # Callback typedefs and functions: return type and the parameter
        # list as written, read (params()) only for what the mirror uses.
        self.fn_types: Dict[str, Tuple[str, str]] = {}
        self.functions: Dict[str, Tuple[str, str]] = {}
        self.unread: List[str] = []
        for st in statements(text):
            self._read(st)

    def _read(self, st: str) -> None:
        m = re.fullmatch(r"(?:typedef )?struct (\w+) ?\{(.*)\} ?(\w*)", st)
        if m:
            # A field this cannot read (a function pointer, `int a, b`)
            # is kept as (None, text): a fault only in a mirrored struct.
            fields: List[Tuple[Optional[str], str]] = []
            for decl in (d.strip() for d in m.group(2).split(";")):
                if not decl:
                    continue
                fm = re.fullmatch(r"(.*?)\b(\w+) ?((?:\[[^\]]*\] ?)*)", decl)
                if not fm or "(" in decl or "," in decl:
                    fields.append((None, decl))
                else:
                    fields.append((fm.group(2), (fm.group(1) + " " + fm.group(3)).strip()))
            self.structs[m.group(1)] = fields
            if m.group(3):
                self.structs[m.group(3)] = fields
            return
        m = re.fullmatch(r"typedef enum ?(\w*) ?\{(.*)\} ?(\w+)", st)
        if m:
            names = [e.split("=")[0].strip() for e in m.group(2).split(",") if e.strip()]
            for n in (m.group(1), m.group(3)):
                if n:
                    self.enums[n] = names
                    self.enum_types.add(n)
            return
        m = re.fullmatch(r"typedef (?:struct|union) (\w+) (\w+)", st)
        if m:
            self.opaque.update((m.group(1), m.group(2)))
            return
        m = re.fullmatch(r"typedef (.+?) ?\( ?\* ?(\w+) ?\) ?\((.*)\)", st)
        if m:
            self.fn_types[m.group(2)] = (m.group(1), m.group(3))
            return
        m = re.fullmatch(r"(?:extern )?(.+?) ?\b(\w+) ?\((.*)\)", st)
        if m and "{" not in st and not st.startswith("typedef"):
            self.functions[m.group(2)] = (m.group(1), m.group(3))
            return
        if re.fullmatch(r"(?:static )?(?:inline )?.+?\b(\w+) ?\(.*?\) ?\{.*\}", st):
            return  # an inline function: nothing the library exports
        if re.fullmatch(r"extern [^(]*", st):
            return  # a variable
        self.unread.append(st)

    @staticmethod
    def params(s: str) -> Tuple[List[str], List[str]]:
        """A parameter list's types and names ("" when unnamed)."""
        s = s.strip()
        if s in ("", "void"):
            return [], []
        types, names = [], []
        for p in _split_top(s):
            if "(" in p:
                m = re.fullmatch(r"(.+?) ?\( ?\* ?(\w*) ?\) ?\((.*)\)", p)
                if not m:
                    raise SystemExit("check_header: cannot read parameter %r" % p)
                types.append(p.replace(m.group(2), "", 1) if m.group(2) else p)
                names.append(m.group(2))
                continue
            p = re.sub(r"\[[^\]]*\]", "*", p)
            toks = re.findall(r"\w+|\*", p)
            if len(toks) >= 2 and re.fullmatch(r"\w+", toks[-1]) and toks[-1] not in _WORDS \
                    and toks[-2] not in ("struct", "enum"):
                names.append(toks[-1])
                toks = toks[:-1]
            else:
                names.append("")
            types.append(" ".join(toks))
        return types, names

    def ctype(self, s: str) -> Type:
        """The canonical form of a C type written in the header."""
        s = s.strip()
        m = re.fullmatch(r"(.+?) ?\( ?\* ?\) ?\((.*)\)", s)
        if m:
            return ("fn", self.ctype(m.group(1)), tuple(self.ctype(p) for p in self.params(m.group(2))[0]))
        arr = re.fullmatch(r"(.*?)\[ ?(\d+) ?\]", s)
        if arr:
            return ("array", self.ctype(arr.group(1)), int(arr.group(2)))
        toks = [t for t in re.findall(r"\w+|\*", s) if t not in ("const", "volatile", "restrict", "struct",
                                                                  "enum")]
        stars = toks.count("*")
        base = " ".join(t for t in toks if t != "*")
        if stars == 0:
            if base == "void":
                return ("void",)
            if base == "char":
                return ("char",)
            if base in _INTS:
                return ("int",) + _INTS[base]
            if base in self.enum_types:
                return ("int", 4, None)
            if base in self.fn_types:
                ret, params = self.fn_types[base]
                return ("fn", self.ctype(ret), tuple(self.ctype(p) for p in self.params(params)[0]))
            if base in self.structs:
                return ("struct", base)
            raise SystemExit("check_header: dlock.h uses a type this check does not know: %r" % s)
        inner = self.ctype(base + " *" * (stars - 1)) if stars > 1 else None
        if stars == 1:
            if base == "char":
                return ("str",)
            if base == "void" or base in self.opaque:
                return ("handle",)
            return ("ptr", self.ctype(base))
        assert inner is not None
        return ("ptr", inner)


# ---------------------------------------------------------------------------
# The C program: what the compiler says of the mirror's names.

def status_names() -> Dict[str, int]:
    """The status codes the package knows: _errors' OK and ERR_*, by their
    C names."""
    return {"DLOCK_" + k: v for k, v in vars(_errors).items()
            if re.fullmatch(r"OK|ERR_[A-Z_]+", k) and isinstance(v, int)}


def program() -> str:
    """C source printing, as JSON, every mirrored struct's size and its
    fields' offsets, sizes and signedness, and the value of every constant
    the package uses; it does not compile when a name is missing."""
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "dlock.h"', "",
             "int main(void) {", '    printf("{\\"structs\\": {");']
    first = True
    for cname, cls in _native.STRUCTS.items():
        lines.append('    printf("%s\\"%s\\": {\\"size\\": %%zu, \\"fields\\": {", sizeof(%s));'
                     % ("" if first else ",", cname, cname))
        first = False
        for i, (fname, ftype) in enumerate(f for f in cls._fields_ if f[0] != "_spare"):
            member = "((%s *)0)->%s" % (cname, fname)
            signed = "0"
            if py_type(ftype)[0] == "int":
                signed = "((__typeof__(%s))-1 < 0)" % member
            lines.append('    printf("%s\\"%s\\": [%%zu, %%zu, %%d]", offsetof(%s, %s), sizeof(%s), (int)%s);'
                         % ("" if i == 0 else ",", fname, cname, fname, member, signed))
        lines.append('    printf("}}");')
    lines.append('    printf("}, \\"values\\": {");')
    values = list(status_names()) + list(_native.DEFINES)
    for members in _native.ENUMS.values():
        values += list(members)
    for i, name in enumerate(values):
        lines.append('    printf("%s\\"%s\\": %%lld", (long long)(%s));' % ("" if i == 0 else ",", name, name))
    lines += ['    printf("}}\\n");', "    return 0;", "}", ""]
    return "\n".join(lines)


def compiled_facts(cc: str, header: str, includes: List[str], work: str) -> Dict[str, Any]:
    src = os.path.join(work, "mirror.c")
    exe = os.path.join(work, "mirror")
    with open(src, "w") as f:
        f.write(program())
    hdir = os.path.dirname(os.path.abspath(header))
    args = [cc, "-std=gnu11", "-Wall", "-I" + hdir] + ["-I" + d for d in includes] + [src, "-o", exe]
    p = subprocess.run(args, capture_output=True, text=True, env=_ENV)
    if p.returncode:
        raise Drift(["a name the mirror uses is not in dlock.h (or has another kind): the C program "
                     "made from the mirror does not compile against it:\n" + p.stderr.strip()])
    out = subprocess.run([exe], capture_output=True, text=True, check=True, env=_ENV).stdout
    return json.loads(out)


class Drift(Exception):
    def __init__(self, problems: List[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


# ---------------------------------------------------------------------------
# The comparison.

def compare(cc: str, header: str, includes: List[str], work: str) -> List[str]:
    """Every difference between the mirror and `header`, one sentence each."""
    problems: List[str] = []
    h = Header(preprocess(cc, header, [os.path.dirname(os.path.abspath(header))] + includes))
    # A declaration this cannot read is a fault where it names something
    # the mirror uses; anything else new in the header is no concern here.
    used = set(_native.STRUCTS) | set(_native._PROTOTYPES) | set(_native.ENUMS) | {"dlock_status"}
    used |= {sym for sym, _ in _native._QUEUE_CALLBACKS.values()}
    for st in h.unread:
        if used & set(re.findall(r"\w+", st)):
            problems.append("cannot read this declaration of dlock.h (teach check_header.py): %s" % st[:200])

    # Structs: the fields by name and order, from the header's text.
    for cname, cls in _native.STRUCTS.items():
        mine = [(f[0], f[1]) for f in cls._fields_ if f[0] != "_spare"]
        theirs = h.structs.get(cname)
        if theirs is None:
            problems.append("struct %s is not in dlock.h (the mirror %s copies it)" % (cname, cls.__name__))
            continue
        for n, decl in theirs:
            if n is None:
                problems.append("struct %s: cannot read its field %r (teach check_header.py)" % (cname, decl))
        names_c = [n or "?" for n, _ in theirs]
        names_py = [n for n, _ in mine]
        if names_c != names_py:
            for i, (a, b) in enumerate(zip(names_c + [None] * 99, names_py + [None] * 99)):
                if a != b:
                    break
            where = "after %s" % names_c[i - 1] if i else "first"
            problems.append(
                "struct %s: its fields in dlock.h are not %s's: field %d (%s) is %s in dlock.h and %s in the "
                "mirror\n  dlock.h: %s\n  mirror:  %s" % (
                    cname, cls.__name__, i, where, repr(a) if a else "nothing", repr(b) if b else "nothing",
                    ", ".join(names_c), ", ".join(names_py)))
        ctypes_of = {n: t for n, t in theirs if n is not None}
        for fname, ftype in mine:
            if fname in ctypes_of:
                c = h.ctype(ctypes_of[fname])
                py = py_type(ftype)
                if not same(c, py):
                    problems.append("struct %s field %s: dlock.h has %s, the mirror %s"
                                    % (cname, fname, show(c), show(py)))

    # Functions the package calls, and the queue callbacks it passes.
    try:
        lib = ctypes.CDLL(_native.path)
    except OSError as e:
        problems.append("cannot load %s: %s" % (_native.path, e))
        lib = None
    wanted: List[Tuple[str, Type, List[Type], str]] = []
    for fn, (restype, argtypes) in _native._PROTOTYPES.items():
        wanted.append((fn, py_type(restype), [py_type(a) for a in argtypes], "calls"))
    for kind, (sym, fntype) in _native._QUEUE_CALLBACKS.items():
        t = py_type(fntype)
        wanted.append((sym, t[1], list(t[2]), "passes as a %s callback" % kind))
    for fn, ret_py, args_py, how in wanted:
        if lib is not None and not hasattr(lib, fn):
            problems.append("%s: the library %s does not export it (the package %s it)" % (fn, _native.path, how))
        decl = h.functions.get(fn)
        if decl is None:
            problems.append("%s: dlock.h declares no such function (the package %s it)" % (fn, how))
            continue
        ret_c, raw = decl
        params_c, pnames = h.params(raw)
        if not same(h.ctype(ret_c), ret_py):
            problems.append("%s returns %s in dlock.h, the mirror says %s" % (fn, show(h.ctype(ret_c)), show(ret_py)))
        if len(params_c) != len(args_py):
            problems.append("%s takes %d arguments in dlock.h (%s), the mirror declares %d"
                            % (fn, len(params_c), ", ".join(params_c), len(args_py)))
            continue
        for i, (pc, ppy) in enumerate(zip(params_c, args_py)):
            c = h.ctype(pc)
            if not same(c, ppy):
                problems.append("%s argument %d (%s): dlock.h has %s (%s), the mirror %s"
                                % (fn, i + 1, pnames[i] or "unnamed", pc, show(c), show(ppy)))

    # Status codes: every one of the header has its exception.
    known = status_names()
    for name in h.enums.get("dlock_status", []):
        if name not in known:
            problems.append("status %s of dlock.h is unknown to the package (dlock/_errors.py)" % name)
    by_status = getattr(_errors, "_BY_STATUS", {})
    for name, value in known.items():
        if name != "DLOCK_OK" and value not in by_status:
            problems.append("status %s has no exception class in dlock/_errors.py" % name)
    if "dlock_status" not in h.enums:
        problems.append("enum dlock_status is not in dlock.h")
    for ename, members in _native.ENUMS.items():
        if ename not in h.enums:
            problems.append("enum %s is not in dlock.h" % ename)
        elif sorted(h.enums[ename]) != sorted(members):
            problems.append("enum %s: dlock.h has %s, the mirror %s"
                            % (ename, ", ".join(h.enums[ename]), ", ".join(members)))

    # What the compiler says: offsets, sizes, values.
    try:
        facts = compiled_facts(cc, header, includes, work)
    except Drift as d:
        return problems + d.problems
    for cname, cls in _native.STRUCTS.items():
        got = facts["structs"][cname]
        mine = [f for f in cls._fields_ if f[0] != "_spare"]
        exact = type("_" + cls.__name__, (ctypes.Structure,), {"_fields_": mine})
        if got["size"] != ctypes.sizeof(exact):
            problems.append("struct %s is %d bytes in C, %d in the mirror %s (without its spare room)"
                            % (cname, got["size"], ctypes.sizeof(exact), cls.__name__))
        for fname, ftype in mine:
            off, size, signed = got["fields"][fname]
            desc = getattr(cls, fname)
            if off != desc.offset:
                problems.append("struct %s field %s is at offset %d in C, %d in the mirror"
                                % (cname, fname, off, desc.offset))
            if size != desc.size:
                problems.append("struct %s field %s is %d bytes in C, %d in the mirror"
                                % (cname, fname, size, desc.size))
            t = py_type(ftype)
            if t[0] == "int" and bool(signed) != t[2]:
                problems.append("struct %s field %s is %s in C, %s in the mirror"
                                % (cname, fname, "signed" if signed else "unsigned",
                                   "signed" if t[2] else "unsigned"))
    mine_values: Dict[str, int] = dict(known)
    mine_values.update(_native.DEFINES)
    for members in _native.ENUMS.values():
        mine_values.update(members)
    for name, value in mine_values.items():
        if facts["values"][name] != value:
            problems.append("%s is %d in dlock.h, %d in the package" % (name, facts["values"][name], value))
    return problems


# ---------------------------------------------------------------------------
# Mutants: copies of the header the check must refuse.

def _blank_comments(src: str) -> str:
    """The source with comments turned to spaces (positions kept)."""
    return re.sub(r"/\*.*?\*/|//[^\n]*", lambda m: re.sub(r"[^\n]", " ", m.group(0)), src, flags=re.S)


def _struct_fields(src: str, name: str) -> List[Tuple[int, int, str, str]]:
    """(start, end, type, field name) of each declaration in struct
    `name`'s body in the source, positions in `src`."""
    blank = _blank_comments(src)
    m = re.search(r"typedef struct %s \{(.*?)\} %s;" % (name, name), blank, re.S)
    if not m:
        raise SystemExit("check_header: mutants: struct %s not found in the header" % name)
    out = []
    pos = m.start(1)
    for decl in m.group(1).split(";")[:-1]:
        start = pos + len(decl) - len(decl.lstrip())
        fm = re.fullmatch(r"\s*(.*?)\b(\w+)\s*", decl, re.S)
        if fm:
            out.append((start, pos + len(decl), " ".join(fm.group(1).split()), fm.group(2)))
        pos += len(decl) + 1
    return out


def mutate_insert_before_last(src: str) -> str:
    fields = _struct_fields(src, "dlock_options")
    start = fields[-1][0]
    return src[:start] + "int dlock__mutant; " + src[start:]


def mutate_append(src: str) -> str:
    fields = _struct_fields(src, "dlock_options")
    end = fields[-1][1] + 1  # after its ';'
    return src[:end] + " int dlock__mutant;" + src[end:]


def mutate_swap(src: str) -> str:
    fields = _struct_fields(src, "dlock_options")
    for a, b in zip(fields, fields[1:]):
        if a[2] == b[2]:
            # Swap the two names, keeping every position before them.
            s = src[:b[0]] + src[b[0]:b[1]].replace(b[3], a[3]) + src[b[1]:]
            return s[:a[0]] + s[a[0]:a[1]].replace(a[3], b[3]) + s[a[1]:]
    raise SystemExit("check_header: mutants: no two adjacent fields of one type in dlock_options")


def _sub(what: str, *patterns: Tuple[str, str]) -> Callable[[str], str]:
    """A mutant made by the first (pattern, replacement) that matches."""
    def mutate(src: str) -> str:
        for pattern, repl in patterns:
            out, n = re.subn(pattern, repl, src, count=1)
            if n:
                return out
        raise SystemExit("check_header: mutants: %s not found in the header" % what)
    return mutate


mutate_status = _sub("DLOCK_ERR_LOST's value", (r"(XX\(\s*ERR_LOST\s*,\s*)-?\d+", r"\g<1>-77"),
                     (r"(DLOCK_ERR_LOST\s*=\s*)-?\d+", r"\g<1>-77"))
mutate_enum = _sub("DLOCK_WRITE's value", (r"(DLOCK_WRITE\s*=\s*)\d+", r"\g<1>2"))
mutate_parameter = _sub("dlock_lock_release", (r"(dlock_lock_release\s*\([^)]*)\)", r"\1, int dlock__mutant)"))
mutate_new_status = _sub("enum dlock_status", (r"(typedef enum dlock_status \{)", r"\1 DLOCK_ERR_MUTANT = -99,"))


# (what, how, a phrase the check's report must have: caught for the
# right reason, not by some other fault).
MUTANTS = [
    ("a field added to dlock_options before its last one", mutate_insert_before_last,
     "'dlock__mutant' in dlock.h"),
    ("a field appended to dlock_options (into its padding)", mutate_append, "'dlock__mutant' in dlock.h"),
    ("two adjacent dlock_options fields of one type swapped", mutate_swap, "at offset"),
    ("DLOCK_ERR_LOST renumbered", mutate_status, "DLOCK_ERR_LOST is -77 in dlock.h"),
    ("DLOCK_WRITE's value changed", mutate_enum, "DLOCK_WRITE is 2 in dlock.h"),
    ("a status code added that the package has no exception for", mutate_new_status,
     "status DLOCK_ERR_MUTANT of dlock.h is unknown"),
    ("a parameter added to dlock_lock_release", mutate_parameter, "dlock_lock_release takes 2 arguments"),
]


def run_mutants(cc: str, header: str, includes: List[str], work: str) -> int:
    with open(header) as f:
        src = f.read()
    failed = 0
    for what, fn, phrase in MUTANTS:
        d = tempfile.mkdtemp(dir=work)
        mutant = os.path.join(d, os.path.basename(header))
        text = fn(src)
        assert text != src, what
        with open(mutant, "w") as f:
            f.write(text)
        # The real header's directory stays on the path for dlock.h's
        # own includes; the mutant's directory comes first.
        problems = compare(cc, mutant, includes + [os.path.dirname(os.path.abspath(header))], d)
        report = "\n    ".join("\n    ".join(p.splitlines()) for p in problems)
        if any(phrase in p for p in problems):
            print("caught: %s:\n    %s" % (what, report))
        elif problems:
            print("MISSED: %s: refused, but not for it (no %r in the report):\n    %s" % (what, phrase, report))
            failed += 1
        else:
            print("MISSED: %s: the check passed a header it must refuse" % what)
            failed += 1
        shutil.rmtree(d)
    return failed


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("--header", required=True)
    ap.add_argument("-I", dest="includes", action="append", default=[])
    ap.add_argument("--mutants", action="store_true")
    a = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dlock-check-header-") as work:
        if a.mutants:
            # The real header must pass first, or the mutants prove nothing.
            problems = compare(a.cc, a.header, a.includes, work)
            if problems:
                print("check_header: the header itself does not match the mirror:\n  "
                      + "\n  ".join(problems), file=sys.stderr)
                return 1
            missed = run_mutants(a.cc, a.header, a.includes, work)
            print("check_header: %d of %d mutants caught" % (len(MUTANTS) - missed, len(MUTANTS)))
            return 1 if missed else 0
        problems = compare(a.cc, a.header, a.includes, work)
    if problems:
        print("check_header: dlock/_native.py or dlock/_errors.py has drifted from %s:" % a.header,
              file=sys.stderr)
        for p in problems:
            print("  - " + p.replace("\n", "\n    "), file=sys.stderr)
        return 1
    print("check_header: the mirror matches %s: %d structs, %d functions, %d callbacks, %d values"
          % (a.header, len(_native.STRUCTS), len(_native._PROTOTYPES), len(_native._QUEUE_CALLBACKS),
             len(status_names()) + len(_native.DEFINES) + sum(len(m) for m in _native.ENUMS.values())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
