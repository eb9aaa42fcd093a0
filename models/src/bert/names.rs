//! Weight names of BERT encoders, as in Hugging Face `BertModel` safetensors
//! (all-MiniLM-L6-v2's `model.safetensors`, for one).

/// Token (word-piece) embedding table, `[n_embd, n_vocab]`.
pub const WORD_EMBEDDINGS: &str = "embeddings.word_embeddings.weight";
/// Absolute position embedding table, `[n_embd, n_ctx_train]`.
pub const POSITION_EMBEDDINGS: &str = "embeddings.position_embeddings.weight";
/// Token-type (segment) embedding table, `[n_embd, n_types]`.
pub const TOKEN_TYPE_EMBEDDINGS: &str = "embeddings.token_type_embeddings.weight";
/// Prefix of the embedding layer norm (`.weight`, `.bias`).
pub const EMBEDDINGS_NORM: &str = "embeddings.LayerNorm";

/// A parameterised part of an encoder layer; its tensors are
/// `encoder.layer.{i}.{path}.weight` and `.bias`.
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

    /// The part's path inside `encoder.layer.{i}`.
    pub fn path(self) -> &'static str {
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

    /// True for the layer norms (vectors), false for the dense layers (matrices).
    pub fn is_norm(self) -> bool {
        matches!(self, LayerPart::AttnNorm | LayerPart::OutputNorm)
    }
}

/// `encoder.layer.{il}.{part}.weight`.
pub fn layer_weight(il: usize, part: LayerPart) -> String {
    format!("encoder.layer.{il}.{}.weight", part.path())
}

/// `encoder.layer.{il}.{part}.bias`.
pub fn layer_bias(il: usize, part: LayerPart) -> String {
    format!("encoder.layer.{il}.{}.bias", part.path())
}
