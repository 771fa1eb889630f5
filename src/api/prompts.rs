//! Messages → prompt tokens: the chat template and the host tokenizer together.

use super::ApiError;
use crate::chat::{ChatMessage, ChatTemplate, RenderOptions, Segment, TemplateError, ToolFormat};
use crate::config::ToolCallFormat;
use crate::ids::TokenId;
use crate::tokenizer::Tokenizer;
use serde_json::Value;

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
    grammars: super::grammars::GrammarCache,
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
            grammars: super::grammars::GrammarCache::default(),
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
    pub fn tokenize(&self, messages: &[ChatMessage], tools: &[Value]) -> Result<Prompt, ApiError> {
        let options = RenderOptions {
            tools: (!tools.is_empty()).then_some(tools),
            ..RenderOptions::default()
        };
        let segments = self
            .template
            .render_with(messages, &options)
            .map_err(|e| match e {
                TemplateError::ReservedCharacter { index } => {
                    ApiError::bad(e.to_string(), Some(&format!("messages[{index}].content")))
                }
                other => ApiError::bad(other.to_string(), Some("messages")),
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

    pub fn grammars(&self) -> &super::grammars::GrammarCache {
        &self.grammars
    }
}
