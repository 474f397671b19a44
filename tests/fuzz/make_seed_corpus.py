#!/usr/bin/env python3
"""Writes the generated seed corpora of the fuzz targets (corpus/<name>/seed_*)
from the project's test inputs: request bodies of tests/unit/test_openai_*.cc
and test_tool_request.cc, tests/data/chat_templates.json and
structured_schemas.json, configs/ and tests/data/quant_*.json, the bundled
model's JSON files, small safetensors files built here, gRPC messages encoded
by protoc. Hand-written regression inputs (corpus/<name>/crash_*, ...) are
left alone. Usage: python3 tests/fuzz/make_seed_corpus.py
"""
import glob
import json
import os
import re
import struct
import subprocess

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
CORPUS = os.path.join(HERE, "corpus")
SEP = b"\n=====\n"  # fuzz_common.h kPartSeparator
MODEL = os.path.join(ROOT, "models", "stories260K")


def read(path, mode="r"):
    with open(path, mode) as f:
        return f.read()


def write_seeds(target, seeds):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    for old in glob.glob(os.path.join(d, "seed_*")):
        os.remove(old)
    for i, s in enumerate(seeds):
        if isinstance(s, str):
            s = s.encode()
        with open(os.path.join(d, "seed_%03d" % i), "wb") as f:
            f.write(s)


def raw_json_literals(path):
    """The R"(...)" literals of a C++ test that are JSON objects by themselves."""
    out = []
    for m in re.finditer(r'R"\((.*?)\)"', read(path), re.S):
        try:
            if isinstance(json.loads(m.group(1)), dict):
                out.append(m.group(1))
        except ValueError:
            pass
    return out


def openai_bodies():
    bodies = []
    for name in ("test_openai_requests.cc", "test_tool_request.cc", "test_openai_http.cc"):
        p = os.path.join(ROOT, "tests", "unit", name)
        if os.path.exists(p):
            bodies += raw_json_literals(p)
    schemas = json.loads(read(os.path.join(ROOT, "tests", "data", "structured_schemas.json")))
    for s in schemas["schemas"][:6]:
        schema = s.get("schema", s)
        bodies.append(json.dumps({"prompt": "x", "max_tokens": 4, "response_format": {
            "type": "json_schema", "json_schema": {"name": "s", "schema": schema}}}))
    bodies.append(json.dumps({"prompt": "x", "guided_regex": "[a-z]{1,5}@(x|y)\\.com"}))
    bodies.append(json.dumps({"prompt": "x", "guided_choice": ["yes", "no"]}))
    bodies.append(json.dumps({"prompt": "x", "guided_grammar": 'root ::= "a" root | "b"'}))
    return bodies


def completion_seeds():
    seeds = [b for b in openai_bodies() if '"messages"' not in b]
    seeds += [json.dumps({"prompt": [1, 2, 3], "echo": True, "logprobs": 2}),
              json.dumps({"prompt": ["Once upon", "a time"], "n": 2, "stop": ["."]}),
              json.dumps({"prompt": [[1, 2], [3]], "max_tokens": 500})]
    return seeds


def chat_seeds():
    chat = json.loads(read(os.path.join(ROOT, "tests", "data", "chat_templates.json")))
    n_templates = 1 + len(chat["templates"])
    bodies = [b for b in openai_bodies() if '"messages"' in b]
    for c in chat["conversations"]:
        body = {"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"]}
        if "tools" in c.get("extra", {}):
            body["tools"] = c["extra"]["tools"]
        bodies.append(json.dumps(body))
    # Each body once, with the templates in turn (byte 0 picks one).
    return [bytes([i % n_templates]) + b.encode() for i, b in enumerate(bodies)]


def chat_template_seeds():
    chat = json.loads(read(os.path.join(ROOT, "tests", "data", "chat_templates.json")))
    jinja = json.loads(read(os.path.join(ROOT, "tests", "data", "jinja_cases.json")))
    convs = [c for c in chat["conversations"] if "templates" not in c]
    seeds = []
    for i, t in enumerate(chat["templates"]):
        for c in convs[i % 3::3]:
            body = {"messages": c["messages"], "add_generation_prompt": c["add_generation_prompt"]}
            if "tools" in c.get("extra", {}):
                body["tools"] = c["extra"]["tools"]
            seeds.append(t["source"].encode() + SEP + json.dumps(body).encode())
    plain = json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode()
    for case in jinja["cases"]:
        seeds.append(case["template"].encode() + SEP + plain)
    return seeds


def model_config_seeds():
    parts = [read(os.path.join(MODEL, n), "rb") for n in
             ("config.json", "generation_config.json", "tokenizer_config.json")]
    seeds = [SEP.join(parts), parts[0]]
    base = json.loads(parts[0])
    variants = [
        {"architectures": ["MistralForCausalLM"], "sliding_window": 64, "head_dim": None},
        {"architectures": ["Qwen2ForCausalLM"], "attention_bias": True, "tie_word_embeddings": True},
        {"architectures": ["Qwen3ForCausalLM"], "head_dim": 16, "rope_scaling": {
            "rope_type": "linear", "factor": 2.0}},
        {"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                          "high_freq_factor": 4.0, "original_max_position_embeddings": 256}},
        {"eos_token_id": [2, 3], "bos_token_id": 1, "num_key_value_heads": 2},
    ]
    for v in variants:
        c = dict(base)
        c.update(v)
        seeds.append(json.dumps(c))
    seeds.append(parts[0] + SEP + b'{"temperature": 0.7, "top_k": 40, "eos_token_id": [2]}' + SEP +
                 json.dumps({"add_bos_token": False, "chat_template": "{{ messages[0].content }}",
                             "bos_token": {"content": "<s>"}, "eos_token": "</s>"}).encode())
    return seeds


def quant_config_seeds():
    seeds = [read(p, "rb") for p in sorted(glob.glob(os.path.join(ROOT, "configs", "*.json")))]
    seeds += [read(p, "rb") for p in
              sorted(glob.glob(os.path.join(ROOT, "tests", "data", "quant_stories_*.json")))]
    seeds += raw_json_literals(os.path.join(ROOT, "tests", "unit", "test_quant_config.cc"))
    return seeds


def safetensors_file(header, data):
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + data


def safetensors_seeds():
    seeds = [safetensors_file(
        {"__metadata__": {"format": "pt"},
         "h": {"dtype": "F16", "shape": [2, 2], "data_offsets": [0, 8]},
         "b": {"dtype": "BF16", "shape": [2], "data_offsets": [8, 12]},
         "s": {"dtype": "F32", "shape": [], "data_offsets": [12, 16]},
         "e": {"dtype": "F32", "shape": [0, 3], "data_offsets": [16, 16]},
         "u": {"dtype": "U8", "shape": [4], "data_offsets": [16, 20]},
         "i": {"dtype": "I8", "shape": [2, 2], "data_offsets": [20, 24]}},
        bytes(range(24)))]
    seeds.append(safetensors_file({"w": {"dtype": "F32", "shape": [3, 2],
                                         "data_offsets": [0, 24]}},
                                  struct.pack("<6f", 1, -2, 0.5, 3e38, -0.0, 1e-40)))
    seeds.append(safetensors_file({}, b""))
    # The bundled model's header with a truncated data section.
    full = read(os.path.join(MODEL, "model.safetensors"), "rb")
    n = struct.unpack("<Q", full[:8])[0]
    seeds.append(full[:8 + n + 64])
    return seeds


def grpc_seeds():
    texts = [
        ("GenerateRequest", 'text: "Once upon a time" sampling { max_tokens: 8 temperature: 0 }'),
        ("GenerateRequest", 'token_ids { ids: [1, 2, 3] } sampling { top_p: 0.9 top_k: 5 '
                            'stop: ["."] stop_token_ids: [2] logprobs: 2 seed: 7 }'),
        ("GenerateRequest", 'model: "stories260K" text: "x" add_special_tokens: false '
                            'sampling { structured_output { regex: "[a-z]+" } }'),
        ("GenerateRequest", 'text: "x" sampling { structured_output { json_schema: '
                            '"{\\"type\\": \\"object\\"}" } }'),
        ("GenerateRequest", 'text: "x" sampling { structured_output { choice { '
                            'choices: ["a", "b"] } } }'),
        ("GenerateRequest", 'text: "" sampling { repetition_penalty: 0 }'),
        ("TokenizeRequest", 'text: "Once upon a time" add_special_tokens: true'),
        ("DetokenizeRequest", 'token_ids: [1, 400, 3, 511]'),
    ]
    method = {"GenerateRequest": 0, "TokenizeRequest": 1, "DetokenizeRequest": 2}
    seeds = []
    for msg, text in texts:
        try:
            encoded = subprocess.run(
                ["protoc", "--proto_path=" + os.path.join(ROOT, "proto"),
                 "--encode=tqserve.v1." + msg, "tqserve/v1/generation.proto"],
                input=text.encode(), capture_output=True, check=True).stdout
        except subprocess.CalledProcessError as e:
            raise SystemExit("protoc: %s: %s" % (text, e.stderr.decode()))
        seeds.append(bytes([method[msg]]) + encoded)
    return seeds


def text_seeds():
    lines = [line for line in read(os.path.join(ROOT, "tests", "data",
                                                "tinystories_valid_sample.txt")).splitlines()
             if line.strip()][:6]
    seeds = [line.encode() for line in lines]
    seeds += ["h\u00e9llo w\u00f6rld \u4e16\u754c \U0001f600 \t\n\r  end".encode(),
              b"\xff\xfe\xc3(\xe2\x82 invalid utf-8 \xf0\x9f\x98", b"<s></s><unk> <0x0A>",
              b"   leading and trailing   ", bytes(range(1, 128))]
    return seeds


def detokenizer_seeds():
    def ids(values):
        return b"".join(struct.pack("<H", v) for v in values)

    seeds = []
    for tok in (0, 1):
        seeds.append(bytes([tok, 0, 0]) + b"".join(bytes([3]) + ids([65 + i, 70 + i, 300 + i, 2])
                                                  for i in range(8)))
        seeds.append(bytes([tok, 2, 1]) + b"." + bytes([3]) + b"the" + bytes([2]) + ids([1, 5]) +
                     b"".join(bytes([i % 4]) + ids([(i * 37) % 512] * 4) for i in range(30)))
        seeds.append(bytes([tok, 1, 4]) + "\u00e9\u4e16".encode()[:4] + bytes([0]) +
                     b"".join(bytes([0]) + ids([0xC3 + i % 40]) for i in range(40)))
    return seeds


def structured_tables(pattern):
    """The raw-string arguments of the table calls in tests/unit/test_structured.cc."""
    text = read(os.path.join(ROOT, "tests", "unit", "test_structured.cc"))
    return [m.group(2) for m in re.finditer(pattern + r'R"(x?)\((.*?)\)\1"', text, re.S)]


# Nesting and repetition (issue 41): nested bounded repetitions, repetition
# of groups that match the empty string, ambiguity, deep groups.
NESTED_REGEXES = [
    "((a{0,10}){0,10}){0,10}", "((((a{0,10}){0,10}){0,10}){0,10}){0,10}", "((a{4096}){4096}){4096}",
    "(a*)*", "(a*)*b", "(a|b*)*", "((a?)?)*", "(|a)+", "(a?){2,}b", "(x(a*)*)*y",
    "(" * 60 + "a" + ")*" * 60, "(a|a|a|a)+b",
]


def json_schema_seeds():
    schemas = json.loads(read(os.path.join(ROOT, "tests", "data", "structured_schemas.json")))
    seeds = [b"\x00" + json.dumps(s.get("schema", s)).encode() for s in schemas["schemas"]]
    seeds += [b"\x01" + json.dumps(s.get("schema", s)).encode() for s in schemas["unsupported"]]
    deep = {"type": "string"}
    for _ in range(40):
        deep = {"type": "array", "items": deep}
    seeds.append(b"\x02" + json.dumps(deep).encode())
    seeds.append(b"\x03" + b'{"a":' * 80 + b"1" + b"}" * 80)
    for r in NESTED_REGEXES[:4]:
        seeds.append(b"\x04" + json.dumps({"type": "string", "pattern": r}).encode())
    seeds.append(b"\x05" + json.dumps({"type": "array", "items": {"anyOf": [
        {"type": "array", "maxItems": 10, "items": {"type": "string", "maxLength": 10}},
        {"$ref": "#"}]}, "maxItems": 10}).encode())
    return seeds


def regex_seeds():
    oracle = json.loads(read(os.path.join(ROOT, "tests", "data", "regex_oracle.json")))
    regexes = [c["pattern"] for c in oracle] + NESTED_REGEXES
    regexes += [r"\d{3}-\d{4}", r"^(cat|dog)s?$", r"[^0-9]+", r"\w+@\w+\.com", r"(?:ab)+?c",
                r"[\d.]+|x{2,}", r"\(\)\[\]", r"(?P<y>\d{4})-(0[1-9]|1[0-2])", "\u00e9+[\x00-\x1f]"]
    return [bytes([i % 2]) + r.encode() for i, r in enumerate(regexes)]


def grammar_seeds():
    grammars = structured_tables(r"CheckTable\(")
    grammars += [
        'root ::= ("a"*)* "b"',
        'root ::= x*\nx ::= "a"? "b"?',
        'root ::= ((((\"a\"{0,10}){0,10}){0,10}){0,10}){0,10}',
        'root ::= x0\n' + "".join("x%d ::= x%d x%d\n" % (i, i + 1, i + 1) for i in range(20))
        + 'x20 ::= "" | "" | "a"\n',
        'root ::= "(" root ")" | ""',
        'root ::= ' + "(" * 150 + '"a"' + ")" * 150,
        'root ::= [\\u0000-\\U0010FFFF]{0,64} "x"{2,4}',
    ]
    return [b"\x00" + g.encode() for g in grammars]


def main():
    write_seeds("completion_request", completion_seeds())
    write_seeds("chat_request", chat_seeds())
    write_seeds("chat_template", chat_template_seeds())
    write_seeds("model_config", model_config_seeds())
    write_seeds("quant_config", quant_config_seeds())
    write_seeds("safetensors", safetensors_seeds())
    write_seeds("grpc_request", grpc_seeds())
    write_seeds("sentencepiece", text_seeds())
    write_seeds("detokenizer", detokenizer_seeds())
    write_seeds("json_schema", json_schema_seeds())
    write_seeds("regex", regex_seeds())
    write_seeds("grammar", grammar_seeds())
    tok = glob.glob(os.path.join(CORPUS, "tokenizer_json", "*"))
    print("seeds written; tokenizer_json has %d files (make_seed_tokenizers.py)" % len(tok))


if __name__ == "__main__":
    main()
