#!/usr/bin/env python3
"""Writes a Hugging Face tokenizer.json from the vocabulary of a GGUF file.

A file format change only: llama.cpp publishes its tokenizer test vocabularies
as GGUF files (ggml-vocab-*.gguf, no tensors) and the C++ tokenizer reads
tokenizer.json. This script parses GGUF v2/v3 (the header and every metadata
key/value, all value types including nested arrays; tensor infos are not
needed) with the standard library only, and writes the byte-level BPE
pipeline GPT-2's own tokenizer.json uses: model BPE (vocab + merges),
ByteLevel pre-tokenizer, post-processor and decoder, and the control /
user-defined tokens as added tokens. The expected ids of the tests stay the
independent ones llama.cpp generated with transformers (the .gguf.out files).

Format source: the GGUF specification (ggml docs/gguf.md): magic "GGUF",
uint32 version, uint64 tensor_count, uint64 metadata_kv_count, then per key a
gguf_string (uint64 length + UTF-8 bytes), a uint32 value type and the value;
arrays are a uint32 element type, a uint64 count and the elements.

    python3 gguf_to_tokenizer_json.py --gguf ggml-vocab-gpt-2.gguf --out DIR

writes DIR/tokenizer.json. Only tokenizer.ggml.model == "gpt2" is supported.
"""
import argparse
import json
import os
import struct
import sys

# GGUF metadata value types -> struct format (scalars); 8 string, 9 array.
_SCALARS = {
    0: "B",  # UINT8
    1: "b",  # INT8
    2: "H",  # UINT16
    3: "h",  # INT16
    4: "I",  # UINT32
    5: "i",  # INT32
    6: "f",  # FLOAT32
    7: "?",  # BOOL
    10: "Q",  # UINT64
    11: "q",  # INT64
    12: "d",  # FLOAT64
}
_STRING, _ARRAY = 8, 9

# llama.cpp's token types (tokenizer.ggml.token_type).
TYPE_NORMAL, TYPE_UNKNOWN, TYPE_CONTROL, TYPE_USER_DEFINED = 1, 2, 3, 4


class GgufError(Exception):
    pass


class _Reader:
    def __init__(self, data, endian):
        self.data, self.pos, self.endian = data, 0, endian

    def take(self, n):
        if self.pos + n > len(self.data):
            raise GgufError(f"truncated at byte {self.pos} (wanted {n} more)")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def scalar(self, fmt):
        return struct.unpack(self.endian + fmt, self.take(struct.calcsize(self.endian + fmt)))[0]

    def string(self):
        return self.take(self.scalar("Q")).decode("utf-8")

    def value(self, vtype):
        if vtype in _SCALARS:
            return self.scalar(_SCALARS[vtype])
        if vtype == _STRING:
            return self.string()
        if vtype == _ARRAY:
            etype, count = self.scalar("I"), self.scalar("Q")
            if etype in _SCALARS:  # one unpack for the whole array
                fmt = _SCALARS[etype]
                raw = self.take(struct.calcsize(self.endian + fmt) * count)
                return list(struct.unpack(f"{self.endian}{count}{fmt}", raw))
            return [self.value(etype) for _ in range(count)]
        raise GgufError(f"unknown value type {vtype} at byte {self.pos}")


def read_gguf_metadata(path):
    """Returns (version, tensor_count, {key: value}) of the GGUF file at path."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"GGUF":
        raise GgufError(f"{path}: not a GGUF file (magic {data[:4]!r})")
    # The version is small, so its byte order tells the file's (v3 allows
    # big-endian files).
    endian = "<"
    (version,) = struct.unpack("<I", data[4:8])
    if version > 0xFFFF:
        endian = ">"
        (version,) = struct.unpack(">I", data[4:8])
    if version not in (2, 3):
        raise GgufError(f"{path}: GGUF version {version} not supported (2 or 3)")
    r = _Reader(data, endian)
    r.pos = 8
    tensor_count, kv_count = r.scalar("Q"), r.scalar("Q")
    meta = {}
    for _ in range(kv_count):
        key = r.string()
        meta[key] = r.value(r.scalar("I"))
    return version, tensor_count, meta


def gpt2_tokenizer_json(meta):
    """The tokenizer.json dict for a GGUF 'gpt2' (byte-level BPE) vocabulary."""
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise GgufError(f"tokenizer.ggml.model is {model!r}; only 'gpt2' is supported")
    tokens = meta["tokenizer.ggml.tokens"]
    merges = meta["tokenizer.ggml.merges"]
    types = meta.get("tokenizer.ggml.token_type", [TYPE_NORMAL] * len(tokens))
    if len(types) != len(tokens):
        raise GgufError(f"{len(types)} token types for {len(tokens)} tokens")
    vocab = {}
    for i, t in enumerate(tokens):
        if t in vocab:
            raise GgufError(f"token {t!r} appears twice (ids {vocab[t]} and {i})")
        vocab[t] = i
    added = [{
        "id": i,
        "content": tokens[i],
        "single_word": False,
        "lstrip": False,
        "rstrip": False,
        "normalized": True,
        "special": types[i] == TYPE_CONTROL,
    } for i in range(len(tokens)) if types[i] in (TYPE_CONTROL, TYPE_USER_DEFINED)]
    for key in ("tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"):
        if key in meta and not 0 <= meta[key] < len(tokens):
            raise GgufError(f"{key} {meta[key]} out of range")
    byte_level = {"add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", **byte_level},
        "post_processor": {"type": "ByteLevel", **byte_level},
        "decoder": {"type": "ByteLevel", **byte_level},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gguf", required=True, help="GGUF file with a tokenizer.ggml.* vocabulary")
    ap.add_argument("--out", required=True, help="directory to write tokenizer.json into")
    args = ap.parse_args()
    try:
        version, tensors, meta = read_gguf_metadata(args.gguf)
        tok = gpt2_tokenizer_json(meta)
    except (GgufError, KeyError, UnicodeDecodeError) as e:
        print(f"{args.gguf}: {e}", file=sys.stderr)
        return 1
    os.makedirs(args.out, exist_ok=True)
    out = os.path.join(args.out, "tokenizer.json")
    with open(out, "w", encoding="utf-8") as f:
        json.dump(tok, f, ensure_ascii=False)
    special = [a["content"] for a in tok["added_tokens"]]
    print(f"{out}: GGUF v{version}, {tensors} tensors, {len(meta)} keys; "
          f"{len(tok['model']['vocab'])} tokens, {len(tok['model']['merges'])} merges, "
          f"added {special}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
