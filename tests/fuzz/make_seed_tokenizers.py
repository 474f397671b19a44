#!/usr/bin/env python3
"""Writes the small tokenizer.json files of the fuzz targets (not any model's):
a byte-level BPE in Llama 3's pipeline shape (data/byte_level/tokenizer.json,
also a corpus seed) and a Metaspace + byte-fallback BPE in Llama 2's shape
(corpus/tokenizer_json/). The merges are learned here, by plain BPE, from the
first lines of tests/data/tinystories_valid_sample.txt.

Usage: python3 tests/fuzz/make_seed_tokenizers.py (rewrites the files).
"""
import collections
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = os.path.join(HERE, "..", "data", "tinystories_valid_sample.txt")
SEP = "\n=====\n"  # fuzz_common.h kPartSeparator


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (HF ByteLevel)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def learn_merges(words, num_merges):
    """Plain BPE over `words` (lists of symbols): the most frequent pair first."""
    counts = collections.Counter(tuple(w) for w in words)
    merges = []
    for _ in range(num_merges):
        pairs = collections.Counter()
        for w, c in counts.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] += c
        if not pairs:
            break
        (a, b), _ = max(pairs.items(), key=lambda kv: (kv[1], kv[0]))
        merges.append((a, b))
        merged = collections.Counter()
        for w, c in counts.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and w[i] == a and w[i + 1] == b:
                    out.append(a + b)
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            merged[tuple(out)] += c
        counts = merged
    return merges


def added(id_, content):
    return {"id": id_, "content": content, "single_word": False, "lstrip": False,
            "rstrip": False, "normalized": False, "special": True}


def byte_level(lines):
    table = bytes_to_unicode()
    words = []
    for line in lines:
        for i, w in enumerate(line.split(" ")):
            words.append([table[b] for b in ((" " if i else "") + w).encode()])
    merges = learn_merges(words, 120)
    vocab = {table[b]: i for i, b in enumerate(range(256))}
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    n = len(vocab)
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(n, "<|begin_of_text|>"), added(n + 1, "<|end_of_text|>"),
                         added(n + 2, "<|eot_id|>")],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": (
                "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}|"
                " ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+")},
             "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<|begin_of_text|>": {
                               "id": "<|begin_of_text|>", "ids": [n],
                               "tokens": ["<|begin_of_text|>"]}}},
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


def metaspace(lines):
    words = []
    for line in lines:
        for w in line.split(" "):
            words.append(["\u2581"] + list(w))
    merges = learn_merges(words, 120)
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab["<0x%02X>" % b] = len(vocab)
    for w in words:
        for ch in w:
            vocab.setdefault(ch, len(vocab))
    for a, b in merges:
        vocab.setdefault(a + b, len(vocab))
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [added(0, "<unk>"), added(1, "<s>"), added(2, "</s>")],
        "normalizer": {"type": "Sequence", "normalizers": [
            {"type": "Prepend", "prepend": "\u2581"},
            {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1],
                                                      "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [
            {"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
            {"type": "ByteFallback"}, {"type": "Fuse"},
            {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>",
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": True, "byte_fallback": True,
                  "vocab": vocab, "merges": [a + " " + b for a, b in merges]},
    }


def main():
    with open(TEXT, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][:40]
    sample = "Once upon a time, a little girl named Lily saw a big dog! \u00e9\u00e8 \u4e16\u754c 123"
    out = {
        os.path.join(HERE, "data", "byte_level", "tokenizer.json"): byte_level(lines),
    }
    for path, tok in out.items():
        with open(path, "w", encoding="utf-8") as f:
            json.dump(tok, f, ensure_ascii=False, indent=0)
    seeds = os.path.join(HERE, "corpus", "tokenizer_json")
    os.makedirs(seeds, exist_ok=True)
    for name, tok in (("byte_level", byte_level(lines)), ("metaspace", metaspace(lines))):
        with open(os.path.join(seeds, name), "w", encoding="utf-8") as f:
            f.write(json.dumps(tok, ensure_ascii=False) + SEP + sample)


if __name__ == "__main__":
    main()
