//! Messages → prompt tokens: the model's prompts are the engine unit's, made by the control
//! plane ([`crate::control::Prompts`]); here, a prompt that cannot be made becomes a 400.

use super::ApiError;
pub use crate::control::{Prompt, PromptError, Prompts};

impl From<PromptError> for ApiError {
    fn from(e: PromptError) -> Self {
        ApiError::bad(e.message, Some(&e.field))
    }
}
