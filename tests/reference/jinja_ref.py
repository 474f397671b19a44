#!/usr/bin/env python3
"""Independent Jinja reference for the chat template and interpreter tests.

Renders templates with Python jinja2 (Debian python3-jinja2) configured as
Hugging Face transformers renders chat templates (chat_template_utils.py,
_compile_jinja_template): ImmutableSandboxedEnvironment(trim_blocks=True,
lstrip_blocks=True) with the loopcontrols extension, a raise_exception global
that raises TemplateError, a strftime_now(format) global (the local time's
datetime.now().strftime(format)), and a tojson filter that is json.dumps(x,
ensure_ascii=False, indent=..., sort_keys=...) (no HTML escaping, keys kept in
order). Run by CTest as a tq_reference fixture:

    python3 jinja_ref.py --cases jinja_cases.json --chat chat_templates.json \
        --out jinja_reference.json

or, for one model directory's tokenizer_config.json (its chat_template,
bos_token and eos_token, as transformers' apply_chat_template passes them):

    python3 jinja_ref.py --render-config DIR/tokenizer_config.json \
        --messages MESSAGES.json [--tools TOOLS.json] [--no-generation-prompt]

which prints {"text": the rendered prompt} (or RESULT's error form) as JSON.

Output: {"cases": {name: RESULT}, "chat": {"<template>/<conversation>": RESULT}}
where RESULT is {"output": str} or {"error": "syntax"|"render"|"raise",
"message": str} (syntax: the template does not compile; raise: the template
called raise_exception; render: any other error while rendering).
"""
import argparse
import datetime
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


class RaisedByTemplate(Exception):
    pass


def make_env():
    def raise_exception(message):
        raise RaisedByTemplate(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    def strftime_now(format):
        return datetime.datetime.now().strftime(format)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, source, context):
    try:
        template = env.from_string(source)
    # Unknown filters and tests are TemplateAssertionErrors (syntax errors);
    # `break` outside a loop fails when jinja2 compiles the generated Python.
    except (jinja2.TemplateSyntaxError, SyntaxError) as e:
        return {"error": "syntax", "message": str(e)}
    try:
        return {"output": template.render(**context)}
    except RaisedByTemplate as e:
        return {"error": "raise", "message": str(e)}
    except Exception as e:  # UndefinedError, TypeError, ... as jinja2 raises them
        return {"error": "render", "message": f"{type(e).__name__}: {e}"}


def special(config, key):
    """A special-token string of tokenizer_config.json: a string or an AddedToken dict."""
    v = config.get(key)
    if isinstance(v, dict):
        v = v.get("content")
    return v


def render_config(env, args):
    with open(args.render_config, encoding="utf-8") as f:
        config = json.load(f)
    with open(args.messages, encoding="utf-8") as f:
        messages = json.load(f)
    source = config["chat_template"]
    if isinstance(source, list):  # [{"name": "default", "template": ...}, ...]
        source = next(t["template"] for t in source if t.get("name") == "default")
    context = {"messages": messages, "add_generation_prompt": not args.no_generation_prompt}
    if args.tools:  # apply_chat_template(tools=...)
        with open(args.tools, encoding="utf-8") as f:
            context["tools"] = json.load(f)
    for key in ("bos_token", "eos_token"):
        if special(config, key) is not None:
            context[key] = special(config, key)
    result = render(env, source, context)
    if "output" in result:
        result = {"text": result["output"]}
    print(json.dumps(result, ensure_ascii=False))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases")
    ap.add_argument("--chat")
    ap.add_argument("--out")
    ap.add_argument("--render-config", help="a tokenizer_config.json to render --messages with")
    ap.add_argument("--messages", help="JSON file: the messages list")
    ap.add_argument("--tools", help="JSON file: the tools list (apply_chat_template's tools)")
    ap.add_argument("--no-generation-prompt", action="store_true")
    args = ap.parse_args()

    env = make_env()
    if args.render_config:
        return render_config(env, args)
    if not (args.cases and args.chat and args.out):
        ap.error("need --cases, --chat and --out (or --render-config and --messages)")
    with open(args.cases, encoding="utf-8") as f:
        cases = json.load(f)["cases"]
    with open(args.chat, encoding="utf-8") as f:
        chat = json.load(f)

    out = {"jinja2_version": jinja2.__version__, "cases": {}, "chat": {}}
    for case in cases:
        out["cases"][case["name"]] = render(env, case["template"], case["context"])
    for t in chat["templates"]:
        for c in chat["conversations"]:
            if "templates" in c and t["name"] not in c["templates"]:
                continue
            context = {
                "messages": c["messages"],
                "add_generation_prompt": c["add_generation_prompt"],
                "bos_token": t["bos_token"],
                "eos_token": t["eos_token"],
            }
            context.update(c.get("extra", {}))
            out["chat"][t["name"] + "/" + c["name"]] = render(env, t["source"], context)

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
    print(f"jinja2 {jinja2.__version__}: {len(out['cases'])} cases, {len(out['chat'])} chat renders "
          f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
