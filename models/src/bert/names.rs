//! Weight names of BERT encoders, in the two schemes the builder binds to:
//! [`BertNames::HuggingFace`], as in Hugging Face `BertModel` safetensors
//! (all-MiniLM-L6-v2's `model.safetensors`), and [`BertNames::Gguf`], as
//! llama.cpp's converter (`convert_hf_to_gguf.py`, class `BertModel`) writes
//! them.
//!
//! The schemes map one to one (gguf-py's `tensor_mapping.py`):
//!
//! | Hugging Face | GGUF |
//! |---|---|
//! | `embeddings.word_embeddings` | `token_embd` |
//! | `embeddings.position_embeddings` | `position_embd` |
//! | `embeddings.token_type_embeddings` | `token_types` |
//! | `embeddings.LayerNorm` | `token_embd_norm` |
//! | `encoder.layer.{i}.attention.self.query` / `key` / `value` | `blk.{i}.attn_q` / `attn_k` / `attn_v` |
//! | `encoder.layer.{i}.attention.output.dense` | `blk.{i}.attn_output` |
//! | `encoder.layer.{i}.attention.output.LayerNorm` | `blk.{i}.attn_output_norm` |
//! | `encoder.layer.{i}.intermediate.dense` | `blk.{i}.ffn_up` |
//! | `encoder.layer.{i}.output.dense` | `blk.{i}.ffn_down` |
//! | `encoder.layer.{i}.output.LayerNorm` | `blk.{i}.layer_output_norm` |
//!
//! each with a `.weight` and a `.bias`, except the three embedding tables
//! (`.weight` only).

/// A parameterised part of an encoder layer, with a weight and a bias.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LayerPart {
    /// Query projection, `[n_embd, n_embd]`.
    Query,
    /// Key projection, `[n_embd, n_embd]`.
    Key,
    /// Value projection, `[n_embd, n_embd]`.
    Value,
    /// Attention output projection, `[n_embd, n_embd]`.
    AttnOutput,
    /// Layer norm after attention, `[n_embd]`.
    AttnNorm,
    /// FFN up projection, `[n_embd, n_ff]`.
    Intermediate,
    /// FFN down projection, `[n_ff, n_embd]`.
    Output,
    /// Layer norm after the FFN, `[n_embd]`.
    OutputNorm,
}

impl LayerPart {
    /// Every part, in the order the builder declares them.
    pub const ALL: [LayerPart; 8] = [
        LayerPart::Query,
        LayerPart::Key,
        LayerPart::Value,
        LayerPart::AttnOutput,
        LayerPart::AttnNorm,
        LayerPart::Intermediate,
        LayerPart::Output,
        LayerPart::OutputNorm,
    ];

    /// The part's path inside `encoder.layer.{i}` (Hugging Face).
    pub fn hf_path(self) -> &'static str {
        match self {
            LayerPart::Query => "attention.self.query",
            LayerPart::Key => "attention.self.key",
            LayerPart::Value => "attention.self.value",
            LayerPart::AttnOutput => "attention.output.dense",
            LayerPart::AttnNorm => "attention.output.LayerNorm",
            LayerPart::Intermediate => "intermediate.dense",
            LayerPart::Output => "output.dense",
            LayerPart::OutputNorm => "output.LayerNorm",
        }
    }

    /// The part's name inside `blk.{i}` (GGUF).
    pub fn gguf_stem(self) -> &'static str {
        match self {
            LayerPart::Query => "attn_q",
            LayerPart::Key => "attn_k",
            LayerPart::Value => "attn_v",
            LayerPart::AttnOutput => "attn_output",
            LayerPart::AttnNorm => "attn_output_norm",
            LayerPart::Intermediate => "ffn_up",
            LayerPart::Output => "ffn_down",
            LayerPart::OutputNorm => "layer_output_norm",
        }
    }

    /// True for the layer norms (vectors), false for the dense layers (matrices).
    pub fn is_norm(self) -> bool {
        matches!(self, LayerPart::AttnNorm | LayerPart::OutputNorm)
    }
}

/// How the BERT builder names its weights (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BertNames {
    /// Hugging Face `BertModel` names: `embeddings.word_embeddings.weight`,
    /// `encoder.layer.{i}.attention.self.query.weight`, ...
    HuggingFace,
    /// llama.cpp GGUF names: `token_embd.weight`, `blk.{i}.attn_q.weight`, ...
    Gguf,
}

impl BertNames {
    /// The token (word-piece) embedding table, `[n_embd, n_vocab]`.
    pub fn word_embeddings(self) -> &'static str {
        match self {
            BertNames::HuggingFace => "embeddings.word_embeddings.weight",
            BertNames::Gguf => "token_embd.weight",
        }
    }

    /// The absolute position embedding table, `[n_embd, n_ctx_train]`.
    pub fn position_embeddings(self) -> &'static str {
        match self {
            BertNames::HuggingFace => "embeddings.position_embeddings.weight",
            BertNames::Gguf => "position_embd.weight",
        }
    }

    /// The token-type (segment) embedding table, `[n_embd, n_types]`.
    pub fn token_type_embeddings(self) -> &'static str {
        match self {
            BertNames::HuggingFace => "embeddings.token_type_embeddings.weight",
            BertNames::Gguf => "token_types.weight",
        }
    }

    /// The embedding layer norm's weight (`bias: false`) or bias (`bias: true`).
    pub fn embeddings_norm(self, bias: bool) -> String {
        let stem = match self {
            BertNames::HuggingFace => "embeddings.LayerNorm",
            BertNames::Gguf => "token_embd_norm",
        };
        format!("{stem}.{}", suffix(bias))
    }

    /// The weight of `part` in layer `il`.
    pub fn layer_weight(self, il: usize, part: LayerPart) -> String {
        self.layer(il, part, false)
    }

    /// The bias of `part` in layer `il`.
    pub fn layer_bias(self, il: usize, part: LayerPart) -> String {
        self.layer(il, part, true)
    }

    fn layer(self, il: usize, part: LayerPart, bias: bool) -> String {
        match self {
            BertNames::HuggingFace => {
                format!("encoder.layer.{il}.{}.{}", part.hf_path(), suffix(bias))
            }
            BertNames::Gguf => format!("blk.{il}.{}.{}", part.gguf_stem(), suffix(bias)),
        }
    }
}

fn suffix(bias: bool) -> &'static str {
    if bias { "bias" } else { "weight" }
}
