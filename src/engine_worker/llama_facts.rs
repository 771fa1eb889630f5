//! What the real backend's handshake says of the loaded model: its facts (vocabulary, turn
//! token, how its cache can be cut), its attention window and its sizes.

use super::KvType;
use crate::protocol::ModelFacts;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

/// Turn-start markers of the common chat formats, the first one the vocabulary has as a
/// single control token is the engine's checkpoint token.
const TURN_MARKERS: [&str; 4] = [
    "<|im_start|>",
    "<|start_header_id|>",
    "<start_of_turn>",
    "<|turn>",
];

pub(super) fn model_facts(
    model: &LlamaModel,
    model_path: &std::path::Path,
    n_ctx: u32,
    kv: KvType,
) -> ModelFacts {
    ModelFacts {
        n_ctx_train: model.n_ctx_train(),
        trims_at_any_token: !(model.is_recurrent() || model.is_hybrid()),
        rewinds_last_token: !(model.is_recurrent() || model.is_hybrid()),
        size: Box::new(model_size(model, kv)),
        ..vocabulary_facts(model, model_path, n_ctx)
    }
}

/// What a model loaded vocabulary-only tells (its layers are not known: no sizes, no cache
/// facts; the caller says those).
pub(super) fn vocabulary_facts(
    model: &LlamaModel,
    model_path: &std::path::Path,
    n_ctx: u32,
) -> ModelFacts {
    let vocab = model.vocab();
    let name = model.meta_val_str("general.name").unwrap_or_else(|_| {
        model_path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let eog = (0..vocab.n_tokens())
        .filter(|t| vocab.is_eog(LlamaToken(*t)))
        .collect();
    let turn_token = TURN_MARKERS.iter().find_map(|marker| {
        let tokens = vocab.tokenize(marker.as_bytes(), false, true);
        match tokens.as_slice() {
            [one] if vocab.is_control(*one) => Some(one.0),
            _ => None,
        }
    });
    let bos = vocab.bos();
    ModelFacts {
        name,
        path: model_path.display().to_string(),
        n_ctx,
        n_ctx_train: 0,
        ctx_chosen_by: String::new(),
        n_vocab: vocab.n_tokens(),
        bos: (bos.0 >= 0).then_some(bos.0),
        eog,
        turn_token,
        trims_at_any_token: false,
        rewinds_last_token: false,
        // set by the engine, which knows the cache it made
        keeps_checkpoints: false,
        rewindable_tokens: 0,
        chat_template: model
            .chat_template(None)
            .ok()
            .and_then(|t| t.to_string().ok()),
        size: Box::default(),
    }
}

/// A token's bytes as the host takes them: a control token that does not end generation
/// wrapped so that it is never taken for text ([`crate::protocol::control_text`]).
pub(super) fn piece(model: &LlamaModel, token: crate::ids::TokenId) -> Vec<u8> {
    let vocab = model.vocab();
    let token = LlamaToken(token);
    if vocab.is_control(token) && !vocab.is_eog(token) {
        return crate::protocol::control_text::wrap(&vocab.token_to_piece(token, true, None));
    }
    vocab.token_to_piece(token, false, None)
}

/// The model's attention window when its header names one (`{arch}.attention.sliding_window`:
/// Gemma 2 and 3, gpt-oss, Phi-3, ...). A header that names one for a model llama.cpp runs
/// without a window only costs that model's cuts of conversations; llama-cpp-2 does not
/// expose `llama_model_n_swa`.
pub(super) fn sliding_window(model: &LlamaModel) -> Option<u32> {
    let arch = model.meta_val_str("general.architecture").ok()?;
    let key = format!("{arch}.attention.sliding_window");
    let window = model.meta_val_str(&key).ok()?.trim().parse::<u32>().ok()?;
    (window > 0).then_some(window)
}

/// The model's quantization (its header's file type) and sizes.
fn model_size(model: &LlamaModel, kv: KvType) -> crate::protocol::ModelSize {
    let meta_u32 = |key: &str| model.meta_val_str(key).ok()?.trim().parse::<u32>().ok();
    let arch = model
        .meta_val_str("general.architecture")
        .unwrap_or_default();
    let head = model.n_embd().max(0) as u32 / model.n_head().max(1);
    let shape = super::model_size::AttentionShape {
        layers: model.n_layer(),
        kv_heads: model.n_head_kv(),
        key_length: meta_u32(&format!("{arch}.attention.key_length")).unwrap_or(head),
        value_length: meta_u32(&format!("{arch}.attention.value_length")).unwrap_or(head),
    };
    // a recurrent model's state is not a cache of cells
    let per_cell = !(model.is_recurrent() || model.is_hybrid());
    crate::protocol::ModelSize {
        quantization: meta_u32("general.file_type")
            .and_then(super::model_size::quantization_name)
            .unwrap_or_default()
            .to_owned(),
        params: model.n_params(),
        weights_bytes: model.size(),
        kv_bytes_per_cell: if per_cell {
            super::model_size::kv_bytes_per_cell(shape, kv)
        } else {
            0
        },
    }
}
