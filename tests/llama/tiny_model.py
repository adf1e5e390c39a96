"""A tiny llama-architecture model with random weights, as a GGUF file, for
the tests that need a real llama.cpp ``llama-server`` and no download.

Two layers, 64-wide; a SentencePiece-style vocabulary of the byte tokens and
printable ASCII, so about one token per character; a chat template. Only the
printable pieces can be sampled, so replies are readable noise that runs to
``max_tokens``. What it says does not matter: the tests read the server's
prompt cache, which works the same for any model.

Usage: python tests/llama/tiny_model.py OUT.gguf   (needs gguf and numpy)
"""

from __future__ import annotations

import sys

import gguf
import numpy as np
import numpy.typing as npt

WIDTH = 64
LAYERS = 2
HEADS = 4
FEED_FORWARD = 128
TRAINED_CONTEXT = 32768
HEAD_WIDTH = WIDTH // HEADS
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>\n' + message['content'] + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def vocabulary() -> tuple[list[bytes], list[float], list[int]]:
    """Tokens, scores and types: three specials, 256 bytes, printable ASCII."""
    kinds = gguf.TokenType
    entries = [("<unk>", 0.0, kinds.UNKNOWN), ("<s>", 0.0, kinds.CONTROL)]
    entries.append(("</s>", 0.0, kinds.CONTROL))
    entries += [(f"<0x{b:02X}>", 0.0, kinds.BYTE) for b in range(256)]
    # SentencePiece writes a space as U+2581.
    entries += [(chr(c), -1.0, kinds.NORMAL) for c in range(0x21, 0x7F)]
    entries.append(("\u2581", -1.0, kinds.NORMAL))
    return (
        [text.encode() for text, _, _ in entries],
        [score for _, score, _ in entries],
        [int(kind) for _, _, kind in entries],
    )


def write(path: str) -> None:
    tokens, scores, types = vocabulary()
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("rosterd-tiny-random")
    writer.add_context_length(TRAINED_CONTEXT)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FEED_FORWARD)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_rope_dimension_count(HEAD_WIDTH)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_unk_token_id(0)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    # The template emits the BOS itself.
    writer.add_add_bos_token(False)
    writer.add_add_eos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    rng = np.random.default_rng(0)

    def random(*shape: int) -> npt.NDArray[np.float32]:
        # numpy's shape is ggml's dimensions reversed.
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    ones = np.ones(WIDTH, dtype=np.float32)
    writer.add_tensor("token_embd.weight", random(len(tokens), WIDTH))
    writer.add_tensor("output_norm.weight", ones)
    # Only printable pieces have output weights: never a raw byte (invalid
    # UTF-8), never end of sequence.
    output = np.zeros((len(tokens), WIDTH), dtype=np.float32)
    printable = [i for i, kind in enumerate(types) if kind == gguf.TokenType.NORMAL]
    output[printable] = (rng.standard_normal((len(printable), WIDTH)) * 0.5).astype(np.float32)
    writer.add_tensor("output.weight", output)
    for layer in range(LAYERS):
        name = f"blk.{layer}."
        writer.add_tensor(name + "attn_norm.weight", ones)
        writer.add_tensor(name + "attn_q.weight", random(HEADS * HEAD_WIDTH, WIDTH))
        writer.add_tensor(name + "attn_k.weight", random(HEADS * HEAD_WIDTH, WIDTH))
        writer.add_tensor(name + "attn_v.weight", random(HEADS * HEAD_WIDTH, WIDTH))
        writer.add_tensor(name + "attn_output.weight", random(WIDTH, HEADS * HEAD_WIDTH))
        writer.add_tensor(name + "ffn_norm.weight", ones)
        writer.add_tensor(name + "ffn_gate.weight", random(FEED_FORWARD, WIDTH))
        writer.add_tensor(name + "ffn_up.weight", random(FEED_FORWARD, WIDTH))
        writer.add_tensor(name + "ffn_down.weight", random(WIDTH, FEED_FORWARD))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


if __name__ == "__main__":
    write(sys.argv[1] if len(sys.argv) > 1 else "tiny.gguf")
