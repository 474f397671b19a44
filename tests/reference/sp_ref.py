#!/usr/bin/env python3
"""Independent SentencePiece reference for the tokenizer tests.

Uses the Python `sentencepiece` package (Debian python3-sentencepiece), not the
C++ code under test, to write for a fixed list of strings their ids (without
BOS/EOS) and decoded text, and for a few id lists (byte fallback, control and
unknown ids) their decoded text. Run by CTest as fixture ref_sp:

    python3 sp_ref.py --model tokenizer.model --out sp_reference.json
"""
import argparse
import json
import os
import sys

import sentencepiece as spm

TEXTS = [
    "Once upon a time",
    "Once upon a time, there was a little girl named Lily.",
    "She liked to play outside in the park with her friends.",
    "",
    " ",
    "   ",
    " leading space",
    "trailing space ",
    "  both  sides  ",
    "line one\nline two\n",
    "\n",
    "tab\tseparated",
    "é",
    "中",
    "😀",
    "naïve café 中文 😀",
    "0123456789 42 3.14",
    "Hello, world! (yes?) \"quoted\" -- a; b: c...",
    "One day, Tim went to the big red box. He saw a cat and said, \"Hi cat! Do you want "
    "to play?\" The cat was happy and they played all day long. The end.",
]

# Id lists whose decoded text is checked (ids refer to the bundled stories260K
# model but are filtered to the model's vocabulary).
def id_lists(sp):
    def piece(p):
        return sp.piece_to_id(p)

    lists = [
        [piece("<0xE4>"), piece("<0xB8>"), piece("<0xAD>")],              # 中
        [piece("<0xC3>"), piece("<0xA9>")],                                # é
        [piece("<0xF0>"), piece("<0x9F>"), piece("<0x98>"), piece("<0x80>")],  # 😀
        [piece("<0xE4>"), piece("<0xB8>")],                                # incomplete
        [piece("<0x0A>")],
        [sp.bos_id(), piece("▁Once"), piece("▁upon"), sp.eos_id()],
        [piece("▁"), piece("▁a")],
        [piece("▁Once"), piece("▁"), piece("▁"), piece("▁a")],
        [sp.unk_id()],
        [piece("▁Once"), sp.unk_id(), piece("▁upon")],
    ]
    return [ids for ids in lists if all(0 <= i < sp.get_piece_size() for i in ids)]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    sp = spm.SentencePieceProcessor(model_file=args.model)
    ref = {
        "vocab_size": sp.get_piece_size(),
        "bos_id": sp.bos_id(),
        "eos_id": sp.eos_id(),
        "unk_id": sp.unk_id(),
        "encode": [],
        "decode": [],
    }
    for text in TEXTS:
        ids = sp.encode(text)
        ref["encode"].append({
            "text": text,
            "ids": ids,
            "pieces": [sp.id_to_piece(i) for i in ids],
            "decoded": sp.decode(ids),
        })
    for ids in id_lists(sp):
        ref["decode"].append({"ids": ids, "text": sp.decode(ids)})

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(ref, f, ensure_ascii=False, indent=1)
    print(f"wrote {len(ref['encode'])} encodings, {len(ref['decode'])} decodings to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
