#!/usr/bin/env python3
"""Writes regex_oracle.json: for each regex of the documented subset with a
repetition of a group that can match the empty string (issue 41, defect 5)
or nested bounded repetitions (defect 2), every string over its alphabet up
to a length, and whether Python's re.fullmatch accepts it. The oracle for
StructuredRegex.NullableRepetitionsMatchPythonRe (tests/unit/test_structured.cc).

  /usr/bin/python3 tests/data/make_regex_oracle.py > tests/data/regex_oracle.json
"""
import itertools
import json
import re

CASES = [
    # (pattern, alphabet, max length)
    ("(a*)*", "ab", 7),
    ("(a*)*b", "ab", 7),
    ("(a*)+", "ab", 7),
    ("(a?)*", "ab", 7),
    ("(a*)*?b", "ab", 7),
    ("(a|b*)*", "abc", 5),
    ("(a*b*)*c", "abc", 5),
    ("(a?b?)+", "abc", 5),
    ("(a*){2,3}b", "ab", 7),
    ("(a*|b)*", "abc", 5),
    ("((a*)*b)*", "ab", 7),
    ("(a?){3}", "ab", 5),
    ("(a?){2,}b", "ab", 7),
    ("(|a)+", "ab", 7),
    ("(a|)*b?", "ab", 7),
    ("((a?)?)*", "ab", 7),
    ("((a{0,2}){0,2}){0,2}", "ab", 10),
    ("((a{0,10}){0,10}){0,10}", "ab", 10),
    ("(x(a*)*)*y", "axy", 5),
]


def main():
    out = []
    for pattern, alphabet, max_len in CASES:
        rx = re.compile(pattern)
        accept, reject = [], []
        for n in range(max_len + 1):
            for chars in itertools.product(alphabet, repeat=n):
                s = "".join(chars)
                (accept if rx.fullmatch(s) else reject).append(s)
        out.append({"pattern": pattern, "accept": accept, "reject": reject})
    print(json.dumps(out, indent=None))


if __name__ == "__main__":
    main()
