//! Messages → prompt tokens: the chat template and the host tokenizer together. Part of the
//! engine unit the control plane makes (the model's prompts are swapped with its engine), so
//! it lives on the control plane's floor; `api` re-exports it and says its errors in HTTP.

use crate::chat::{ChatMessage, ChatTemplate, RenderOptions, Segment, TemplateError, ToolFormat};
use crate::config::ToolCallFormat;
use crate::ids::TokenId;
use crate::service::Grammar;
use crate::tokenizer::Tokenizer;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Mutex;

/// A tokenized prompt.
#[derive(Debug)]
pub struct Prompt {
    pub tokens: Vec<TokenId>,
    /// The generation prompt ends inside an open `<think>`.
    pub starts_in_reasoning: bool,
}

#[derive(Debug)]
pub struct Prompts {
    tokenizer: Tokenizer,
    template: ChatTemplate,
    /// The format forced by `tool_call_format`, if any.
    forced: Option<ToolFormat>,
    /// Output grammars built for this model's recent requests.
    grammars: GrammarCache,
}

/// Why a prompt could not be made, and the request's field at fault (`messages`, or one
/// message's `content`): `api` says it as a 400 naming that field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct PromptError {
    pub message: String,
    pub field: String,
}

impl Prompts {
    pub fn new(tokenizer: Tokenizer) -> Result<Self, TemplateError> {
        let template = ChatTemplate::new(
            tokenizer.chat_template().as_deref(),
            &tokenizer.bos_text(),
            &tokenizer.eos_text(),
        )?;
        Ok(Self {
            tokenizer,
            template,
            forced: None,
            grammars: GrammarCache::default(),
        })
    }

    /// The tool-call format from the config (`auto` keeps the template's); a template that
    /// renders tools in a form no parser reads is said once, here, in the log.
    pub fn with_tool_call_format(mut self, format: ToolCallFormat) -> Self {
        self.forced = match format {
            ToolCallFormat::Auto => None,
            ToolCallFormat::Hermes | ToolCallFormat::Granite => Some(ToolFormat::Hermes),
            ToolCallFormat::Qwen3Coder => Some(ToolFormat::Xml),
            ToolCallFormat::Harmony => Some(ToolFormat::Harmony),
            ToolCallFormat::Mistral => Some(ToolFormat::Mistral),
            ToolCallFormat::Llama3 => Some(ToolFormat::Llama3),
            ToolCallFormat::Glm4 => Some(ToolFormat::Glm),
            ToolCallFormat::DeepseekV3 => Some(ToolFormat::DeepSeek),
            ToolCallFormat::DeepseekV32 => Some(ToolFormat::DeepSeekDsml),
            ToolCallFormat::KimiK2 => Some(ToolFormat::Kimi),
            ToolCallFormat::Apriel => Some(ToolFormat::Apriel),
            ToolCallFormat::NemotronV2 => Some(ToolFormat::Nemotron),
            ToolCallFormat::Cohere => Some(ToolFormat::Cohere),
            ToolCallFormat::Apertus => Some(ToolFormat::Apertus),
            ToolCallFormat::Granite3 => Some(ToolFormat::Granite3),
            ToolCallFormat::MinimaxM1 => Some(ToolFormat::MiniMaxM1),
            ToolCallFormat::Gigachat3 => Some(ToolFormat::GigaChat3),
            ToolCallFormat::Gigachat31 => Some(ToolFormat::GigaChat31),
            ToolCallFormat::DeepseekR1 => Some(ToolFormat::DeepSeekR1),
            ToolCallFormat::MinimaxM2 => Some(ToolFormat::MiniMaxM2),
            ToolCallFormat::MuseGlimmer => Some(ToolFormat::Glimmer),
            ToolCallFormat::MiniCpm5 => Some(ToolFormat::MiniCpm5),
            ToolCallFormat::Hy3 => Some(ToolFormat::Hy3),
            ToolCallFormat::KimiK3 => Some(ToolFormat::KimiK3),
            ToolCallFormat::Gemma4 => Some(ToolFormat::Gemma4),
            ToolCallFormat::Lfm2 => Some(ToolFormat::Lfm2),
            ToolCallFormat::SolarOpen => Some(ToolFormat::Solar),
            ToolCallFormat::FunctionaryV31 => Some(ToolFormat::Functionary),
        };
        if self.tool_format() == ToolFormat::Other {
            tracing::warn!(
                "the model's chat template writes tool calls in a form this server does not parse: \
                 calls arrive as text (set `tool_call_format` if the model uses a known family)"
            );
        }
        self
    }

    /// The prompt for `messages` with `tools` offered (OpenAI-shaped; empty offers none).
    pub fn tokenize(
        &self,
        messages: &[ChatMessage],
        tools: &[Value],
    ) -> Result<Prompt, PromptError> {
        let options = RenderOptions {
            tools: (!tools.is_empty()).then_some(tools),
            ..RenderOptions::default()
        };
        let segments = self
            .template
            .render_with(messages, &options)
            .map_err(|e| PromptError {
                message: e.to_string(),
                field: match e {
                    TemplateError::ReservedCharacter { index } => {
                        format!("messages[{index}].content")
                    }
                    _ => "messages".to_owned(),
                },
            })?;
        // A generation prompt that opens reasoning (`<think>`, or the family's own opener)
        // starts the output inside it.
        let format = self.tool_format();
        let starts_in_reasoning = segments.iter().rev().find_map(|s| match s {
            Segment::Markup(m) => Some(format.opens_reasoning(m)),
            Segment::Text(_) => None,
        }) == Some(true)
            && matches!(segments.last(), Some(Segment::Markup(_)));
        Ok(Prompt {
            tokens: self.tokenizer.tokenize_segments(&segments),
            starts_in_reasoning,
        })
    }

    /// How the model writes tool calls (a grammar is built only for the Hermes form).
    pub fn tool_format(&self) -> ToolFormat {
        self.forced.unwrap_or_else(|| self.template.tool_format())
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }

    pub fn grammars(&self) -> &GrammarCache {
        &self.grammars
    }
}

/// Built grammars kept per model.
const CACHE_ENTRIES: usize = 32;

/// The grammars built for recent requests, most recently used last (`api/grammars.rs` builds
/// and keys them). Hand-written rather than an LRU crate: 32 entries of a 32-byte key, a
/// linear scan is all it needs.
#[derive(Debug, Default)]
pub struct GrammarCache {
    entries: Mutex<VecDeque<([u8; 32], Grammar)>>,
}

impl GrammarCache {
    pub fn get(&self, key: &[u8; 32]) -> Option<Grammar> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let at = entries.iter().position(|(k, _)| k == key)?;
        let entry = entries.remove(at)?;
        let grammar = entry.1.clone();
        entries.push_back(entry);
        Some(grammar)
    }

    pub fn put(&self, key: [u8; 32], grammar: Grammar) {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        if entries.len() >= CACHE_ENTRIES {
            entries.pop_front();
        }
        entries.push_back((key, grammar));
    }
}
