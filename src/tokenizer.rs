//! The host-side tokenizer: the same GGUF loaded vocab-only, so tokenizing a newcomer never
//! waits behind an engine step. The only place outside `engine_worker` that touches llama-cpp-2.
//!
//! Message text is tokenized with `parse_special = false` (a user who types `<|im_start|>` gets
//! seven ordinary tokens, never the control token); template markup with `parse_special = true`.

use crate::chat::Segment;
use crate::ids::TokenId;
use crate::protocol::sim_vocab::{
    EOG as FAKE_EOG, FIM_MID, FIM_PRE, FIM_REP, FIM_SEP, FIM_SUF, SPECIAL as SIM_SPECIAL,
};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::token::LlamaToken;
use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("llama.cpp backend: {0}")]
    Backend(String),
    #[error("cannot load the vocabulary of {path}: {message}")]
    Load { path: String, message: String },
}

/// llama.cpp's backend, started once in this process ([`crate::machine::backend`]).
fn backend() -> Result<&'static LlamaBackend, TokenizerError> {
    crate::machine::backend().map_err(TokenizerError::Backend)
}

/// A model's fill-in-the-middle tokens: prefix, suffix and middle always; the repository and
/// file-separator tokens of the repository-level form when it has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FimTokens {
    pub prefix: TokenId,
    pub suffix: TokenId,
    pub middle: TokenId,
    pub repo: Option<TokenId>,
    pub file_sep: Option<TokenId>,
}

/// A GGUF's vocabulary, or the simulated engine's byte vocabulary.
pub struct Tokenizer {
    model: Option<LlamaModel>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("simulated", &self.model.is_none())
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
        Ok(Self { model: Some(model) })
    }

    /// The simulated engine's vocabulary: token `b` is byte `b`; ChatML's `<|im_start|>` is
    /// its turn token and `<|im_end|>` its end of generation.
    pub fn simulated() -> Self {
        Self { model: None }
    }

    /// Whether llama.cpp takes `gbnf` (start rule `root`) for this vocabulary: the engine
    /// would refuse the request's sampler otherwise. The simulated vocabulary takes any.
    pub fn check_grammar(&self, gbnf: &str) -> Result<(), String> {
        let Some(model) = &self.model else {
            return Ok(());
        };
        llama_cpp_2::sampling::LlamaSampler::grammar(model, gbnf, "root")
            .map(drop)
            .map_err(|e| e.to_string())
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
        if let Some(bos) = self.bos_to_add()
            && tokens.first() != Some(&bos)
        {
            tokens.insert(0, bos);
        }
        tokens
    }

    fn tokenize(&self, text: &str, parse_special: bool) -> Vec<TokenId> {
        let Some(model) = &self.model else {
            return simulated_tokens(text, parse_special);
        };
        model
            .vocab()
            .tokenize(text.as_bytes(), false, parse_special)
            .into_iter()
            .map(|t| t.0)
            .collect()
    }

    /// The token's text as raw bytes (control tokens render as nothing).
    pub fn piece(&self, token: TokenId) -> Vec<u8> {
        match &self.model {
            Some(model) => model.vocab().token_to_piece(LlamaToken(token), false, None),
            None => u8::try_from(token).map(|b| vec![b]).unwrap_or_default(),
        }
    }

    pub fn is_control(&self, token: TokenId) -> bool {
        match &self.model {
            Some(model) => model.vocab().is_control(LlamaToken(token)),
            None => token > 255,
        }
    }

    pub fn is_eog(&self, token: TokenId) -> bool {
        match &self.model {
            Some(model) => model.vocab().is_eog(LlamaToken(token)),
            None => token == FAKE_EOG,
        }
    }

    /// The model's fill-in-the-middle tokens, from its vocabulary (llama.cpp finds them by
    /// the GGUF's ids or by their names in every family: `<|fim_prefix|>`, `<fim-prefix>`,
    /// `<PRE>`, ...); `None` when it lacks the prefix, suffix or middle token. The simulated
    /// vocabulary has all five.
    pub fn fim(&self) -> Option<FimTokens> {
        let Some(model) = &self.model else {
            return Some(FimTokens {
                prefix: FIM_PRE,
                suffix: FIM_SUF,
                middle: FIM_MID,
                repo: Some(FIM_REP),
                file_sep: Some(FIM_SEP),
            });
        };
        let vocab = model.vocab();
        let known = |t: LlamaToken| (t.0 >= 0).then_some(t.0);
        Some(FimTokens {
            prefix: known(vocab.fim_pre())?,
            suffix: known(vocab.fim_suf())?,
            middle: known(vocab.fim_mid())?,
            repo: known(vocab.fim_rep()),
            file_sep: known(vocab.fim_sep()),
        })
    }

    /// The BOS token when the model asks for one at the start of a prompt.
    pub fn bos_to_add(&self) -> Option<TokenId> {
        let vocab = self.model.as_ref()?.vocab();
        let bos = vocab.bos().0;
        (vocab.should_add_bos() && bos >= 0).then_some(bos)
    }

    /// The context the model was trained for, from its header's `{arch}.context_length`
    /// (a vocabulary-only load reads no hyperparameters, so `n_ctx_train` would say 0); 0 for
    /// the simulated vocabulary or a header without it.
    pub fn context_length(&self) -> u32 {
        let Some(model) = &self.model else {
            return 0;
        };
        let arch = model
            .meta_val_str("general.architecture")
            .unwrap_or_default();
        model
            .meta_val_str(&format!("{arch}.context_length"))
            .ok()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| model.n_ctx_train())
    }

    pub fn chat_template(&self) -> Option<String> {
        self.model
            .as_ref()?
            .chat_template(None)
            .ok()
            .and_then(|t| t.to_string().ok())
    }

    /// The text of a token as the vocabulary spells it (`<|im_end|>` for a control token).
    pub fn token_text(&self, token: TokenId) -> Option<String> {
        self.model
            .as_ref()?
            .vocab()
            .text(LlamaToken(token))
            .map(|t| t.to_string_lossy().into_owned())
    }

    pub fn bos_text(&self) -> String {
        let Some(model) = &self.model else {
            return String::new();
        };
        self.token_text(model.vocab().bos().0).unwrap_or_default()
    }

    pub fn eos_text(&self) -> String {
        let Some(model) = &self.model else {
            return "<|im_end|>".into();
        };
        self.token_text(model.vocab().eos().0).unwrap_or_default()
    }
}

/// Bytes, with the simulated engine's special tokens (ChatML's markers, the fill-in-the-middle
/// tokens) by their names when the text is markup.
fn simulated_tokens(text: &str, parse_special: bool) -> Vec<TokenId> {
    let mut tokens = Vec::with_capacity(text.len());
    let mut rest = text;
    while !rest.is_empty() {
        let special = parse_special
            .then(|| SIM_SPECIAL.iter().find(|(_, name)| rest.starts_with(name)))
            .flatten();
        match special {
            Some((token, name)) => {
                tokens.push(*token);
                rest = &rest[name.len()..];
            }
            None => {
                let next = rest.chars().next().map_or(1, char::len_utf8);
                tokens.extend(rest[..next].bytes().map(TokenId::from));
                rest = &rest[next..];
            }
        }
    }
    tokens
}
