#!/usr/bin/env bash
# Trains the default model's sentencepiece tokenizer (tokenizer/tokenizer.model + .vocab) on the
# training split of the shared corpus, with the Debian `spm_train` binary, on the CPU (~10 s).
#
# Split rule (the same in scripts/train_default_model.py): the corpus is a list of documents
# separated by lines that hold only `<|endoftext|>`. With N documents, the LAST ceil(N/100) of
# them (48 of 4748) are the validation split; neither the tokenizer nor the model sees them.
#
# The tokenizer: byte-level-fallback BPE, 8192 ids, unk 0 / bos 1 / eos 2 / pad 3 (eos is the
# document separator in the model's training stream). Identity normalization and no whitespace
# clean-up, so decode(encode(s)) == s for any valid UTF-8 s; characters never seen in training
# (and the newline, since spm_train reads one paragraph per line) are encoded as UTF-8 byte ids.
# Every training character gets a piece (coverage 1.0: the corpus has only 95 of them, digits
# are rare but must not fall back to bytes). All 158,889 training lines fit under
# input_sentence_size, so the whole split is used; the shuffle and seed only matter if it grows.
#
# Usage: bash scripts/train_tokenizer.sh [corpus.txt.xz]   (default: /work/shared/corpus/corpus.txt.xz)
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=${1:-/work/shared/corpus/corpus.txt.xz}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

xz -dc "$corpus" > "$tmp/corpus.txt"
n_docs=$(( $(grep -c -x '<|endoftext|>' "$tmp/corpus.txt") + 1 ))
n_val=$(( (n_docs + 99) / 100 ))
n_train=$(( n_docs - n_val ))
# One paragraph per line; separator lines dropped; documents [0, n_train) to train.txt.
awk -v n_train="$n_train" -v train="$tmp/train.txt" -v val="$tmp/val.txt" '
    $0 == "<|endoftext|>" { doc++; next }
    { print > (doc < n_train ? train : val) }' "$tmp/corpus.txt"
echo "documents: $n_docs, train: $n_train ($(wc -l < "$tmp/train.txt") lines), validation: $n_val (the last ones)"

# Run inside $tmp with relative names: the model file records its input and prefix, and fixed
# names keep it byte-for-byte reproducible.
start=$(date +%s.%N)
(cd "$tmp" && spm_train --input=train.txt --model_prefix=tokenizer \
    --model_type=bpe --vocab_size=8192 --character_coverage=1.0 --byte_fallback=true \
    --normalization_rule_name=identity --remove_extra_whitespaces=false --split_digits=true \
    --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 \
    --max_sentence_length=16384 --input_sentence_size=1000000 --shuffle_input_sentence=true \
    --random_seed=20240607 --num_threads=2 --minloglevel=1)
printf 'spm_train: %.1f s\n' "$(echo "$(date +%s.%N) - $start" | bc)"
mkdir -p tokenizer
mv "$tmp/tokenizer.model" "$tmp/tokenizer.vocab" tokenizer/

# Compression on the validation split, paragraph by paragraph (newlines not counted).
val_bytes=$(tr -d '\n' < "$tmp/val.txt" | wc -c)
val_tokens=$(spm_encode --model=tokenizer/tokenizer.model --output_format=id < "$tmp/val.txt" | wc -w)
echo "validation: $val_bytes bytes -> $val_tokens tokens, $(echo "scale=3; $val_bytes / $val_tokens" | bc) bytes/token"
sha256sum tokenizer/tokenizer.model tokenizer/tokenizer.vocab
