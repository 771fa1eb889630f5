#!/usr/bin/env python3
"""A tiny recurrent model for the tests: Mamba (llama.cpp's `mamba` architecture: a state
that cannot be cut inside a sequence) with random weights, 2 layers of width 64, and the
vocabulary of another GGUF (the test model's), so that text tokenizes as usual. No small
recurrent GGUF ships in a package we can fetch (issue "Conversations on sliding-window and
recurrent models"); random weights serve tests of exactness: a state continued from a
checkpoint must give the same greedy tokens as the same prompt read from scratch.

Deterministic: the same inputs give the same file (seeded weights).

Usage: make-mamba-gguf.py VOCAB_SOURCE.gguf OUT.gguf   (needs the `gguf` package)
"""

import sys

import numpy as np
from gguf import GGUFReader, GGUFValueType, GGUFWriter

N_EMBD = 64
N_LAYER = 2
D_INNER = 2 * N_EMBD  # llama.cpp supports an expansion factor of 2 only
D_STATE = 16
D_CONV = 4
DT_RANK = 4


def copy_vocabulary(reader: GGUFReader, writer: GGUFWriter) -> int:
    """Copies every `tokenizer.*` key; returns the vocabulary's size."""
    n_vocab = 0
    for name, field in reader.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value = field.contents()
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            writer.add_array(name, value)
            if name == "tokenizer.ggml.tokens":
                n_vocab = len(value)
        elif kind == GGUFValueType.STRING:
            writer.add_string(name, value)
        else:
            writer.add_key_value(name, value, kind)
    return n_vocab


def main() -> None:
    source, out = sys.argv[1], sys.argv[2]
    reader = GGUFReader(source)
    writer = GGUFWriter(out, "mamba")
    writer.add_name("strata-test-mamba")
    writer.add_context_length(8192)
    writer.add_embedding_length(N_EMBD)
    writer.add_feed_forward_length(0)
    writer.add_head_count(0)
    writer.add_block_count(N_LAYER)
    writer.add_ssm_conv_kernel(D_CONV)
    writer.add_ssm_inner_size(D_INNER)
    writer.add_ssm_state_size(D_STATE)
    writer.add_ssm_time_step_rank(DT_RANK)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # all F32
    n_vocab = copy_vocabulary(reader, writer)
    if n_vocab == 0:
        sys.exit(f"{source} has no tokenizer.ggml.tokens")

    rng = np.random.default_rng(20261206)

    def normal(*shape: int, std: float = 0.02) -> np.ndarray:
        # numpy's shape is llama.cpp's dimensions reversed
        return (rng.standard_normal(shape) * std).astype(np.float32)

    writer.add_tensor("token_embd.weight", normal(n_vocab, N_EMBD, std=1.0))
    writer.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    for i in range(N_LAYER):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
        writer.add_tensor(p + "ssm_in.weight", normal(2 * D_INNER, N_EMBD, std=0.2))
        writer.add_tensor(p + "ssm_conv1d.weight", normal(D_INNER, D_CONV, std=0.5))
        writer.add_tensor(p + "ssm_conv1d.bias", normal(D_INNER))
        writer.add_tensor(p + "ssm_x.weight", normal(DT_RANK + 2 * D_STATE, D_INNER, std=0.2))
        writer.add_tensor(p + "ssm_dt.weight", normal(D_INNER, DT_RANK, std=0.2))
        writer.add_tensor(p + "ssm_dt.bias", normal(D_INNER, std=0.5))
        # A = -exp(A_log): negative, so the state decays
        a = -np.exp(normal(D_INNER, D_STATE, std=0.5))
        writer.add_tensor(p + "ssm_a", a.astype(np.float32))
        writer.add_tensor(p + "ssm_d", np.ones(D_INNER, dtype=np.float32))
        writer.add_tensor(p + "ssm_out.weight", normal(N_EMBD, D_INNER, std=0.2))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    main()
