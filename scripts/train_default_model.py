"""Trains the default model: a small OLMo-2 (transformers Olmo2ForCausalLM) on the shared corpus.

Runs on the GPU machine (one H200, torch + transformers + sentencepiece); the device call is
scripts/run_training_on_device.sh. Steps:
  1. Read the corpus, split it into documents at the `<|endoftext|>` lines and hold out the LAST
     ceil(N/100) documents as the validation split (48 of 4748; the same rule as
     scripts/train_tokenizer.sh, so neither the tokenizer nor the model sees them).
  2. Tokenize each split with tokenizer/tokenizer.model into one stream: every document is
     followed by eos (id 2), so eos separates documents.
  3. Train on random 512-token windows: each epoch cuts the stream into windows at a random
     offset and visits them in random order. bf16 autocast, AdamW, linear warmup then cosine decay.
     The schedule runs on "progress" = max(step / max_steps, elapsed / seconds), so a run ends
     at its epoch count or at its share of the wall-clock budget, whichever comes first, with
     the learning rate fully decayed either way.
  4. The corpus is small (8.8 M tokens) and the machine fast (~27 epochs fit in the budget), so
     the number of epochs is chosen by validation loss: one run per count in --epochs (same
     seed), validation loss (mean nats/token over non-overlapping 512-token windows) measured
     regularly, and the weights with the lowest one over all runs are kept.
  5. Save those in bf16 with save_pretrained (config.json, generation_config.json,
     model.safetensors) and print three sample continuations.
"""
import argparse
import lzma
import math
import time

import sentencepiece as spm
import torch
import torch.nn.functional as F
from transformers import GenerationConfig, Olmo2Config, Olmo2ForCausalLM

UNK, BOS, EOS, PAD = 0, 1, 2, 3  # ids fixed by scripts/train_tokenizer.sh


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--corpus", default=".carry/corpus.txt.xz")
    p.add_argument("--tokenizer", default="tokenizer/tokenizer.model")
    p.add_argument("--out", required=True, help="folder for the checkpoint")
    p.add_argument("--train_seconds", type=float, default=420.0, help="wall-clock budget of all runs")
    p.add_argument("--epochs", default="4,8,12", help="epoch counts to try, one run each")
    p.add_argument("--batch_size", type=int, default=64)
    p.add_argument("--seq_len", type=int, default=512)
    p.add_argument("--lr", type=float, default=2e-3)
    p.add_argument("--min_lr_ratio", type=float, default=0.1, help="final lr / peak lr")
    p.add_argument("--warmup_steps", type=int, default=100)
    p.add_argument("--weight_decay", type=float, default=0.1)
    p.add_argument("--eval_every", type=int, default=100, help="steps between validation passes")
    p.add_argument("--seed", type=int, default=1234)
    return p.parse_args()


def model_config():
    # ~18.9 M parameters: 10 layers of width 384, 6 query heads sharing 2 KV heads (GQA),
    # head_dim 64, SwiGLU width 1024, tied embeddings, vocabulary of the tokenizer.
    return Olmo2Config(
        vocab_size=8192, hidden_size=384, intermediate_size=1024, num_hidden_layers=10,
        num_attention_heads=6, num_key_value_heads=2, max_position_embeddings=2048,
        rope_parameters={"rope_type": "default", "rope_theta": 500000.0}, rms_norm_eps=1e-6,
        tie_word_embeddings=True, bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD)


def load_splits(corpus_path, tokenizer):
    """Token streams (train, val): documents each followed by EOS; the last ceil(N/100) are val."""
    with lzma.open(corpus_path, "rt", encoding="utf-8") as f:
        docs = f.read().rstrip("\n").split("\n<|endoftext|>\n")
    n_val = -(-len(docs) // 100)
    print(f"documents: {len(docs)}, train: {len(docs) - n_val}, validation: {n_val} (the last ones)")

    def stream(split):
        ids = [tok for doc in tokenizer.encode(split) for tok in doc + [EOS]]
        return torch.tensor(ids, dtype=torch.long)

    return stream(docs[:-n_val]), stream(docs[-n_val:])


def epoch_windows(tokens, seq_len, gen):
    """All (seq_len + 1)-token windows of one epoch, cut at a random offset, in random order."""
    offset = int(torch.randint(seq_len, (1,), generator=gen))
    n = (len(tokens) - 1 - offset) // seq_len
    starts = (offset + seq_len * torch.randperm(n, generator=gen)).to(tokens.device)
    return tokens[starts[:, None] + torch.arange(seq_len + 1, device=tokens.device)]  # (n, seq_len + 1)


def cross_entropy(model, windows):
    """Mean next-token loss in nats over a batch of (seq_len + 1)-token windows."""
    with torch.autocast("cuda", dtype=torch.bfloat16):
        logits = model(input_ids=windows[:, :-1]).logits
    return F.cross_entropy(logits.float().flatten(0, 1), windows[:, 1:].flatten())


@torch.no_grad()
def evaluate(model, val_windows, batch_size):
    model.eval()
    total = sum(cross_entropy(model, val_windows[i:i + batch_size]).item() * len(val_windows[i:i + batch_size])
                for i in range(0, len(val_windows), batch_size))
    model.train()
    return total / len(val_windows)


def lr_at(progress, step, args):
    warmup = min(1.0, (step + 1) / args.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return args.lr * warmup * (args.min_lr_ratio + (1.0 - args.min_lr_ratio) * cosine)


def train(model, data, max_epochs, train_seconds, args):
    """One training run; returns the lowest validation loss seen, its step and a copy of its weights."""
    train_tokens, val_windows = data
    gen = torch.Generator().manual_seed(args.seed)
    tokens_per_step = args.batch_size * args.seq_len
    steps_per_epoch = (len(train_tokens) - 1) // tokens_per_step
    max_steps = int(max_epochs * steps_per_epoch)
    print(f"=== run: {max_epochs:g} epochs = {max_steps} steps of {tokens_per_step:,} tokens "
          f"({steps_per_epoch} steps/epoch), or {train_seconds:.0f} s")

    # Weight decay on matrices (embedding included), none on the RMSNorm weights.
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=True)

    best = {"loss": float("inf"), "step": 0, "state": None}

    def validate(step):
        loss = evaluate(model, val_windows, args.batch_size)
        if loss < best["loss"]:
            best.update(loss=loss, step=step, state={k: v.detach().clone() for k, v in model.state_dict().items()})
        return loss

    print(f"step 0: val loss {validate(0):.4f}")
    step, progress, window_pos, windows = 0, 0.0, 0, None
    loss_sum, loss_count = torch.zeros((), device=train_tokens.device), 0
    t_train = time.time()
    while progress < 1.0:
        if windows is None or window_pos + args.batch_size > len(windows):
            windows, window_pos = epoch_windows(train_tokens, args.seq_len, gen), 0
        batch = windows[window_pos:window_pos + args.batch_size]
        window_pos += args.batch_size

        lr = lr_at(progress, step, args)
        for group in optimizer.param_groups:
            group["lr"] = lr
        loss = cross_entropy(model, batch)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_sum += loss.detach()
        loss_count += 1
        step += 1
        elapsed = time.time() - t_train
        progress = max(step / max_steps, elapsed / train_seconds)

        if step % args.eval_every == 0 or progress >= 1.0:
            train_loss = loss_sum.item() / loss_count
            loss_sum.zero_()
            loss_count = 0
            print(f"step {step}: epoch {step / steps_per_epoch:.2f}, train loss {train_loss:.4f}, "
                  f"val loss {validate(step):.4f}, lr {lr:.2e}, grad norm {grad_norm.item():.3f}, "
                  f"{step * tokens_per_step / elapsed / 1e6:.2f} M tok/s, {elapsed:.0f} s")

    print(f"=== run end: {step} steps, {step * tokens_per_step:,} tokens ({step / steps_per_epoch:.2f} epochs) "
          f"in {time.time() - t_train:.1f} s; best val loss {best['loss']:.4f} at step {best['step']}")
    return best


def main():
    args = parse_args()
    t_start = time.time()
    device = "cuda"
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")

    tokenizer = spm.SentencePieceProcessor(model_file=args.tokenizer)
    train_tokens, val_tokens = load_splits(args.corpus, tokenizer)
    n_val_windows = (len(val_tokens) - 1) // args.seq_len
    val_windows = val_tokens[:n_val_windows * args.seq_len + 1].unfold(0, args.seq_len + 1, args.seq_len).to(device)
    data = (train_tokens.to(device), val_windows)
    print(f"tokens: train {len(train_tokens):,}, validation {len(val_tokens):,} "
          f"({n_val_windows} windows of {args.seq_len}); tokenized in {time.time() - t_start:.1f} s")

    # One run per epoch count, each from the same seed, sharing the time budget in proportion
    # to its epochs; the weights with the lowest validation loss over all runs are kept.
    config = model_config()
    print(config)
    epoch_counts = [float(e) for e in args.epochs.split(",")]
    best = {"loss": float("inf")}
    for epochs in epoch_counts:
        torch.manual_seed(args.seed)
        model = Olmo2ForCausalLM(config).to(device)
        run = train(model, data, epochs, args.train_seconds * epochs / sum(epoch_counts), args)
        if run["loss"] < best["loss"]:
            best = dict(run, epochs=epochs)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"chosen: the {best['epochs']:g}-epoch run at step {best['step']}, val loss {best['loss']:.4f}; "
          f"model: {n_params:,} parameters ({n_params * 2 / 1e6:.1f} MB in bf16)")

    # Save the best weights in bf16; report the loss of exactly what is saved.
    model.load_state_dict(best["state"])
    model = model.to(torch.bfloat16)
    model.generation_config = GenerationConfig(bos_token_id=BOS, eos_token_id=EOS, pad_token_id=PAD, do_sample=False)
    print(f"saved checkpoint (bf16): val loss {evaluate(model, val_windows, args.batch_size):.4f}")
    model.save_pretrained(args.out)

    # Three continuations: greedy, then two sampled (temperature 0.8, top-k 50) with fixed seeds.
    samples = [("Once upon a time", None), ("Once upon a time", 1), ("The little rabbit", 2)]
    model.eval()
    for prompt, seed in samples:
        ids = torch.tensor([tokenizer.encode(prompt)], device=device)
        if seed is None:
            how, sampling = "greedy", {"do_sample": False}
        else:
            torch.manual_seed(seed)
            how, sampling = f"sampled, temperature 0.8, top-k 50, seed {seed}", \
                {"do_sample": True, "temperature": 0.8, "top_k": 50}
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=100,
                             eos_token_id=EOS, pad_token_id=PAD, **sampling)
        print(f"--- sample ({how}) ---\n{tokenizer.decode(out[0].tolist())}")
    print(f"total wall time {time.time() - t_start:.1f} s")


if __name__ == "__main__":
    main()
