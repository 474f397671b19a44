#!/usr/bin/env python3
"""Independent tokenizer reference for the integration tests.

Reads {"encode": [text, ...], "decode": [[id, ...], ...]} as JSON on stdin and
writes {"encode": [[id, ...], ...], "decode": [text, ...]} to stdout, computed
by the Python sentencepiece package (Debian python3-sentencepiece), not by
tqserve. Encoding adds no BOS/EOS, as `sp.encode` does by default.

    sp_fixture.py models/stories260K/tokenizer.model < request.json
"""
import json
import sys

import sentencepiece as spm


def main():
    sp = spm.SentencePieceProcessor(model_file=sys.argv[1])
    req = json.load(sys.stdin)
    out = {
        "encode": [sp.encode(t) for t in req.get("encode", [])],
        "decode": [sp.decode(ids) for ids in req.get("decode", [])],
        "bos_id": sp.bos_id(),
        "eos_id": sp.eos_id(),
        "vocab_size": sp.get_piece_size(),
    }
    json.dump(out, sys.stdout, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
