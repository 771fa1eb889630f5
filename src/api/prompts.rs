//! Messages → prompt tokens: the chat template and the host tokenizer together.

use super::ApiError;
use crate::chat::{ChatMessage, ChatTemplate, TemplateError};
use crate::ids::TokenId;
use crate::tokenizer::Tokenizer;

#[derive(Debug)]
pub struct Prompts {
    tokenizer: Tokenizer,
    template: ChatTemplate,
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
        })
    }

    pub fn tokenize(&self, messages: &[ChatMessage]) -> Result<Vec<TokenId>, ApiError> {
        let segments = self.template.render(messages).map_err(|e| match e {
            TemplateError::ReservedCharacter { index } => {
                ApiError::bad(e.to_string(), Some(&format!("messages[{index}].content")))
            }
            other => ApiError::bad(other.to_string(), Some("messages")),
        })?;
        Ok(self.tokenizer.tokenize_segments(&segments))
    }

    pub fn tokenizer(&self) -> &Tokenizer {
        &self.tokenizer
    }
}
