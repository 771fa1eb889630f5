//! The host-side tokenizer: the same GGUF loaded vocab-only, so tokenizing a newcomer never
//! waits behind an engine step. The only place outside `engine_worker` that touches llama-cpp-2.
//!
//! Message text is tokenized with `parse_special = false` (a user who types `<|im_start|>` gets
//! seven ordinary tokens, never the control token); template markup with `parse_special = true`.

use crate::chat::Segment;
use crate::ids::TokenId;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;
use std::path::Path;
use std::sync::OnceLock;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("llama.cpp backend: {0}")]
    Backend(String),
    #[error("cannot load the vocabulary of {path}: {message}")]
    Load { path: String, message: String },
}

/// llama.cpp's backend may be initialised once per process.
fn backend() -> Result<&'static LlamaBackend, TokenizerError> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            let backend = LlamaBackend::init().map_err(|e| e.to_string())?;
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            Ok(backend)
        })
        .as_ref()
        .map_err(|e| TokenizerError::Backend(e.clone()))
}

pub struct Tokenizer {
    model: LlamaModel,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("n_vocab", &self.model.n_vocab())
            .finish()
    }
}

impl Tokenizer {
    /// Loads only the vocabulary of a GGUF (no weights).
    pub fn load(path: &Path) -> Result<Self, TokenizerError> {
        let params = LlamaModelParams::default().with_vocab_only(true);
        let model = LlamaModel::load_from_file(backend()?, path, &params).map_err(|e| {
            TokenizerError::Load {
                path: path.display().to_string(),
                message: e.to_string(),
            }
        })?;
        Ok(Self { model })
    }

    /// Plain text: special-token markup in it stays text.
    pub fn tokenize_text(&self, text: &str) -> Vec<TokenId> {
        self.tokenize(text, false)
    }

    /// Template markup: `<|im_start|>` and its kind become their control tokens.
    pub fn tokenize_markup(&self, text: &str) -> Vec<TokenId> {
        self.tokenize(text, true)
    }

    /// A rendered prompt: markup segments as specials, message text as plain text; the BOS
    /// token first when the model asks for one and the template did not write it.
    pub fn tokenize_segments(&self, segments: &[Segment]) -> Vec<TokenId> {
        let mut tokens = Vec::new();
        for segment in segments {
            match segment {
                Segment::Markup(text) => tokens.extend(self.tokenize_markup(text)),
                Segment::Text(text) => tokens.extend(self.tokenize_text(text)),
            }
        }
        let vocab = self.model.vocab();
        let bos = vocab.bos().0;
        if vocab.should_add_bos() && bos >= 0 && tokens.first() != Some(&bos) {
            tokens.insert(0, bos);
        }
        tokens
    }

    fn tokenize(&self, text: &str, parse_special: bool) -> Vec<TokenId> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), false, parse_special)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// The token's text as raw bytes (control tokens render as nothing).
    pub fn piece(&self, token: TokenId) -> Vec<u8> {
        self.model
            .vocab()
            .token_to_piece(LlamaToken(token), false, None)
    }

    pub fn is_control(&self, token: TokenId) -> bool {
        self.model.vocab().is_control(LlamaToken(token))
    }

    pub fn is_eog(&self, token: TokenId) -> bool {
        self.model.vocab().is_eog(LlamaToken(token))
    }

    pub fn chat_template(&self) -> Option<String> {
        self.model
            .chat_template(None)
            .ok()
            .and_then(|t| t.to_string().ok())
    }

    /// The text of a token as the vocabulary spells it (`<|im_end|>` for a control token).
    pub fn token_text(&self, token: TokenId) -> Option<String> {
        self.model
            .vocab()
            .text(LlamaToken(token))
            .map(|t| t.to_string_lossy().into_owned())
    }

    pub fn bos_text(&self) -> String {
        let bos = self.model.vocab().bos();
        self.token_text(bos.0).unwrap_or_default()
    }

    pub fn eos_text(&self) -> String {
        let eos = self.model.vocab().eos();
        self.token_text(eos.0).unwrap_or_default()
    }
}
