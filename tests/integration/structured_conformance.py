#!/usr/bin/env python3
"""Structured-output conformance against independent checkers.

Starts `tqserve serve` on a random-weight model (so nothing but the grammar
makes the output valid) and, through the HTTP API:
  * for every schema of tests/data/structured_schemas.json, N seeded samples
    (response_format json_schema on chat and completions alternately) must
    finish with "stop", parse with json.loads and validate with
    python3-jsonschema (Draft 2020-12, formats checked);
  * JSON mode (response_format json_object) outputs must parse to objects;
    JSON mode has no length bound, and a random model can wander inside
    strings until max_tokens: an output cut by "length" must still be a
    prefix of a JSON object (json_prefix below, not the server's grammar),
    and at most a quarter of the samples may be cut; the same for a schema
    marked "unbounded" whose language has no length bound (ref_recursive: a
    tree of any depth, where a random model's branching can go on past any
    max_tokens);
  * guided_regex outputs must re.fullmatch their pattern; guided_choice
    outputs must be one of the choices; guided_grammar outputs must be in
    the grammar's language (checked by a Python regex of the same language);
  * every unsupported schema must be a 400 naming the keyword.
Prints the counts; exits 1 on any failure.

Usage: structured_conformance.py TQSERVE_BIN TOKENIZER_MODEL WORK_DIR [SAMPLES]
"""
import concurrent.futures
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
SCHEMAS = os.path.join(HERE, "..", "data", "structured_schemas.json")

REGEXES = [
    r"\d{3}-\d{4}",
    r"(cat|dog)s?",
    r"[A-Z][a-z]{2,5}",
    r"(ab|c){1,4}d?",
    r"[0-9a-f]{4}",
    r"\w{1,5}@\w{1,5}\.(com|org)",
    r"-?\d{1,3}\.\d{2}",
    r"[^\n]{3}",
]
CHOICES = [["yes", "no"], ["red", "green", "blue", "a \"quoted\" one"], ["x"]]
GRAMMARS = [
    # (GBNF text, an equivalent Python regex)
    ('root ::= "(" [0-9]+ ("," [0-9]+){0,2} ")"', r"\(\d+(,\d+){0,2}\)"),
    ('root ::= greeting " " name\ngreeting ::= "hi" | "hello"\nname ::= [a-z]{1,8}',
     r"(hi|hello) [a-z]{1,8}"),
]


def start_server(binary, model_dir):
    proc = subprocess.Popen(
        [binary, "serve", "--model", model_dir, "--port", "0", "--grpc-port", "0",
         "--max-model-len", "2048", "--max-num-seqs", "32", "--disable-log-requests"],
        stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        m = re.search(r"listening on http://([^:]+):(\d+)", line)
        if m:
            return proc, f"http://127.0.0.1:{m.group(2)}"
    raise RuntimeError("tqserve did not start")


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=300) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def wait_ready(base):
    import time
    for _ in range(600):
        try:
            with urllib.request.urlopen(base + "/health", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.1)
    raise RuntimeError("tqserve not healthy")


NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][-+]?[0-9]+)?")


def json_prefix(text):
    """Whether `text` is a proper prefix of some JSON object (RFC 8259): a
    recursive-descent scan that succeeds when the text ends inside a value
    and raises nowhere before (complete documents are json.loads' job)."""

    class End(Exception):
        pass

    i = 0
    n = len(text)

    def peek():
        if i >= n:
            raise End
        return text[i]

    def ws():
        nonlocal i
        while i < n and text[i] in " \t\n\r":
            i += 1

    def lit(word):
        nonlocal i
        for ch in word:
            if peek() != ch:
                raise ValueError(f"expected {word!r} at {i}")
            i += 1

    def string():
        nonlocal i
        lit('"')
        while True:
            c = peek()
            i += 1
            if c == '"':
                return
            if c == "\\":
                e = peek()
                i += 1
                if e == "u":
                    for _ in range(4):
                        if peek() not in "0123456789abcdefABCDEF":
                            raise ValueError(f"bad \\u escape at {i}")
                        i += 1
                elif e not in '"\\/bfnrt':
                    raise ValueError(f"bad escape at {i}")
            elif ord(c) < 0x20:
                raise ValueError(f"control character in a string at {i}")

    def number():
        nonlocal i
        rest = text[i:]
        if rest and all(c in "-+.eE0123456789" for c in rest):  # the text ends in it
            for tail in ("", "0"):
                try:
                    if isinstance(json.loads(rest + tail), (int, float)):
                        raise End
                except json.JSONDecodeError:
                    pass
        m = NUMBER.match(text, i)
        if not m:
            raise ValueError(f"bad number at {i}")
        i = m.end()

    def value():
        nonlocal i
        ws()
        c = peek()
        if c == "{":
            members("{", "}", True)
        elif c == "[":
            members("[", "]", False)
        elif c == '"':
            string()
        elif c in "tfn":
            lit({"t": "true", "f": "false", "n": "null"}[c])
        else:
            number()

    def members(open_, close, keyed):
        nonlocal i
        lit(open_)
        ws()
        if peek() == close:
            i += 1
            return
        while True:
            ws()
            if keyed:
                string()
                ws()
                lit(":")
            value()
            ws()
            c = peek()
            i += 1
            if c == close:
                return
            if c != ",":
                raise ValueError(f"expected ',' or {close!r} at {i - 1}")

    try:
        ws()
        if peek() != "{":
            return False
        value()
        return False  # complete (or trailing data): not a proper prefix
    except End:
        return True
    except ValueError:
        return False


def generate(base, seed, extra, max_tokens=400):
    """One sample, chat for even seeds and completions for odd: (text, finish_reason)."""
    body = {"seed": seed, "temperature": 1.0, "max_tokens": max_tokens, **extra}
    if seed % 2 == 0:
        body["messages"] = [{"role": "user", "content": "Answer."}]
        status, r = post(base, "/v1/chat/completions", body)
        if status != 200:
            raise RuntimeError(f"{status}: {r}")
        c = r["choices"][0]
        return c["message"]["content"], c["finish_reason"]
    body["prompt"] = "Once upon a time"
    status, r = post(base, "/v1/completions", body)
    if status != 200:
        raise RuntimeError(f"{status}: {r}")
    c = r["choices"][0]
    return c["text"], c["finish_reason"]


def main():
    binary, tokenizer, work = sys.argv[1], sys.argv[2], sys.argv[3]
    samples = int(sys.argv[4]) if len(sys.argv) > 4 else 20
    model_dir = os.path.join(work, "random-512")
    os.makedirs(work, exist_ok=True)
    subprocess.run([binary, "make-random-model", "--out", model_dir, "--hidden-size", "64",
                    "--intermediate-size", "128", "--num-layers", "2", "--num-heads", "4",
                    "--vocab-size", "512", "--tokenizer", tokenizer, "--seed", "18"],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    suite = json.load(open(SCHEMAS))
    proc, base = start_server(binary, model_dir)
    failures = []
    counts = {}
    try:
        wait_ready(base)
        jobs = []
        for entry in suite["schemas"]:
            rf = {"response_format": {"type": "json_schema", "json_schema": {
                "name": entry["name"], "schema": entry["schema"], "strict": True}}}
            for seed in range(samples):
                jobs.append(("schema", entry, seed, rf))
        for seed in range(samples):
            jobs.append(("json_object", None, seed, {"response_format": {"type": "json_object"}}))
        for pattern in REGEXES:
            for seed in range(samples):
                jobs.append(("regex", pattern, seed, {"guided_regex": pattern}))
        for choices in CHOICES:
            for seed in range(samples // 2):
                jobs.append(("choice", choices, seed, {"guided_choice": choices}))
        for text, py in GRAMMARS:
            for seed in range(samples // 2):
                jobs.append(("grammar", (text, py), seed, {"guided_grammar": text}))

        def run(job):
            kind, what, seed, extra = job
            unbounded = kind == "json_object" or (kind == "schema" and what.get("unbounded"))
            text, finish = generate(base, seed, extra, 2000 if unbounded else 400)
            return job, text, finish

        format_checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
        truncated = 0
        truncated_schema = {}  # unbounded schema name -> samples cut by length
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            for job, text, finish in pool.map(run, jobs):
                kind, what, seed, _ = job
                label = f"{kind} {what['name'] if kind == 'schema' else what} seed {seed}"
                ok = finish == "stop"
                try:
                    if kind == "schema" and what.get("unbounded") and finish == "length":
                        ok = json_prefix(text)
                        truncated_schema[what["name"]] = truncated_schema.get(what["name"], 0) + 1
                        label += " (cut by length)"
                    elif kind == "schema":
                        jsonschema.validate(json.loads(text), what["schema"],
                                            cls=jsonschema.Draft202012Validator,
                                            format_checker=format_checker)
                    elif kind == "json_object":
                        if finish == "length":
                            ok = json_prefix(text)
                            truncated += 1
                            label += " (cut by length)"
                        else:
                            ok = ok and isinstance(json.loads(text), dict)
                    elif kind == "regex":
                        ok = ok and re.fullmatch(what, text) is not None
                    elif kind == "choice":
                        ok = ok and text in what
                    else:
                        ok = ok and re.fullmatch(what[1], text) is not None
                except (ValueError, jsonschema.ValidationError) as e:
                    ok = False
                    label += f": {e}"
                c = counts.setdefault(kind, [0, 0])
                c[0 if ok else 1] += 1
                if not ok:
                    failures.append(f"{label}: finish {finish}, output {text!r}")

        refused = [0, 0]
        for entry in suite["unsupported"]:
            status, r = post(base, "/v1/chat/completions", {
                "messages": [{"role": "user", "content": "x"}], "max_tokens": 4,
                "response_format": {"type": "json_schema",
                                    "json_schema": {"name": "u", "schema": entry["schema"]}}})
            err = r.get("error", {})
            ok = (status == 400 and err.get("param") == "response_format"
                  and f"'{entry['keyword']}'" in err.get("message", ""))
            refused[0 if ok else 1] += 1
            if not ok:
                failures.append(f"unsupported {entry}: {status} {r}")
    finally:
        proc.terminate()
        proc.wait(timeout=60)

    schemas = len(suite["schemas"])
    print(f"schemas: {schemas} x {samples} samples: {counts['schema'][0]} valid, "
          f"{counts['schema'][1]} invalid")
    for kind in ("json_object", "regex", "choice", "grammar"):
        print(f"{kind}: {counts[kind][0]} valid, {counts[kind][1]} invalid")
    print(f"json_object: {truncated} of {samples} cut by max_tokens (valid prefixes)")
    if truncated * 4 > samples:
        failures.append(f"json_object: {truncated} of {samples} samples cut by max_tokens")
    for name, cut in sorted(truncated_schema.items()):
        print(f"schema {name}: {cut} of {samples} cut by max_tokens (valid prefixes)")
        if cut * 4 > samples:
            failures.append(f"schema {name}: {cut} of {samples} samples cut by max_tokens")
    print(f"unsupported schemas: {refused[0]} refused with 400 naming the keyword, "
          f"{refused[1]} not")
    for f in failures[:20]:
        print("FAIL", f)
    return 1 if failures or schemas < 40 else 0


if __name__ == "__main__":
    sys.exit(main())
