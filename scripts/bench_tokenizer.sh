#!/usr/bin/env bash
# Tokenizer benchmark: ./tokenize against Hugging Face `tokenizers` (one thread) on the first MB
# megabytes of the corpus (default 8), for every tokenizer in tests/tokenizers/, with an
# ids-identical check. Needs python3 with `tokenizers`. Run from anywhere:
#   bash scripts/bench_tokenizer.sh [MB]      (CORPUS=path overrides the corpus file)
set -e
cd "$(dirname "$0")/.."
corpus=${CORPUS:-.carry/corpus.txt.xz}
[ -e "$corpus" ] || corpus=/work/shared/corpus/corpus.txt.xz
make -s tokenize
python3 scripts/bench_tokenizer.py "$corpus" "${1:-8}" tests/tokenizers/*.json
